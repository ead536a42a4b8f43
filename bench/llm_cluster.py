"""A servefleet cluster serving servefleet.llm for bench/llm.py: a controller
(sqlite, process runtime), a proxy, and `build_openai_app` deployed from
config as a user deploys it, at /llm."""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from servefleet._private.configuration.config_file import load_config
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient


class LLMCluster:
    path = "/llm"

    def __init__(self, llm_configs: list[dict[str, Any]], working_dir: str = "") -> None:
        self.work = Path(tempfile.mkdtemp(prefix="servefleet-llm-"))
        app: dict[str, Any] = {"name": "llm", "route_prefix": self.path,
                               "import_path": "servefleet.llm:build_openai_app",
                               "args": {"llm_configs": llm_configs}}
        if working_dir:
            app["runtime"] = {"working_dir": working_dir}
        (self.work / "llm.yaml").write_text(yaml.safe_dump({"applications": [app]}))

    def __enter__(self) -> LLMCluster:
        args = ["--allow-working-dir", "/"]
        self.controller = ControllerProcess(f"sqlite://{self.work}/state.db",
                                            log_dir=self.work, extra_args=args).start()
        while not self.controller.is_leader():
            time.sleep(0.05)
        self.client = ControllerClient(self.controller.address, timeout=30)
        self.client.deploy_applications(load_config(str(self.work / "llm.yaml")).applications)
        self.proxy = ProxyProcess([self.controller.address], log_dir=self.work).start()
        self.port = int(self.proxy.url.rsplit(":", 1)[1])
        self.url = self.proxy.url + self.path
        return self

    def __exit__(self, *exc: object) -> None:
        self.proxy.stop()
        with contextlib.suppress(Exception):
            self.client.shutdown()
        self.client.close()
        self.controller.stop()
