"""The reference pages generated from code are current (the config file's
keys from its schema, the gRPC API from the protos), say what their sources
say, and the site's link hook sends links that leave docs/ to the repository."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from servefleet._private import proto_docs
from servefleet._private.configuration import config_docs
from servefleet._private.configuration.config_schema import config_schema

ROOT = Path(__file__).resolve().parent.parent


def test_the_config_page_is_current() -> None:
    committed = (ROOT / config_docs.PAGE_PATH).read_text()
    assert committed == config_docs.page(), (
        f"{config_docs.PAGE_PATH} is stale: run `.venv/bin/python -m servefleet._private."
        f"configuration.config_docs {config_docs.PAGE_PATH}` and commit the result")


def test_the_grpc_page_is_current() -> None:
    committed = (ROOT / proto_docs.PAGE_PATH).read_text()
    assert committed == proto_docs.page(), (
        f"{proto_docs.PAGE_PATH} is stale: run `.venv/bin/python -m "
        f"servefleet._private.proto_docs {proto_docs.PAGE_PATH}` and commit the result")


def test_the_config_page_has_every_key_of_the_schema() -> None:
    text = config_docs.page()
    schema = config_schema()
    for name, section in [("The file", schema), *schema["$defs"].items()]:
        heading = name if name == "The file" else f"`{name}`"
        body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
        for key in section["properties"]:
            assert f"| `{key}`" in body, (name, key)


def test_the_grpc_page_has_every_rpc_message_and_field_with_its_comment() -> None:
    text = proto_docs.page()
    for proto in (ROOT / "proto" / "servefleet" / "v1").glob("*.proto"):
        source = proto.read_text()
        for rpc in re.findall(r"^\s*rpc (\w+)\(", source, re.M):
            assert f"| `{rpc}` |" in text, rpc
        for message in re.findall(r"^message (\w+) \{", source, re.M):
            assert f"\n### {message}\n" in text, message
    # A field's comment reaches its row.
    row = next(line for line in text.splitlines() if line.startswith("| `route_prefix` | 9 |"))
    assert "HTTP route prefix, starting with" in row and "optional string" in row


def test_the_generators_write_their_pages(tmp_path) -> None:
    for module in ("configuration.config_docs", "proto_docs"):
        out = tmp_path / f"{module}.md"
        subprocess.run([sys.executable, "-m", f"servefleet._private.{module}", str(out)],
                       check=True, timeout=60)
        assert out.read_text() == sys.modules[f"servefleet._private.{module}"].page()


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks",
                                                  ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_the_link_hook_sends_links_leaving_docs_to_the_repository() -> None:
    hooks = _hooks()
    outside = hooks._outside_target
    assert outside("design.md", "../controller/server.py") == ("controller/server.py", "")
    assert outside("guides/deploy.md", "../../README.md#x") == ("README.md", "x")
    assert outside("guides/deploy.md", "../design.md#x") is None
    assert outside("design.md", "https://example.com/a") is None
    assert outside("design.md", "#anchor") is None
    config = {"repo_url": "https://github.com/servefleet/servefleet"}
    assert (hooks.repository_url(config, "controller", "") ==
            "https://github.com/servefleet/servefleet/tree/main/controller")
    page = "See [server](../controller/server.py#L1) and\n```\n[code](../x.py)\n```\n"
    links = [(path, anchor) for _, path, anchor in hooks._outside_links(page, "design.md")]
    assert links == [("controller/server.py", "L1")]


def test_links_to_the_readmes_old_sections_go_to_pages_that_have_them() -> None:
    hooks = _hooks()
    for anchor, target in hooks.README_SECTIONS.items():
        page, _, heading = target.partition("#")
        text = (ROOT / "docs" / page).read_text()
        if heading:
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.*)$", text, re.M)}
            assert heading in slugs, (anchor, target)


def test_the_readme_is_a_front_door_into_the_site() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    # The two commands CI and users rely on, first, exactly.
    assert readme.startswith(
        "# servefleet\n\nOn a fresh Debian 12 machine, from a clone of this repository:\n\n"
        "```sh\nscripts/demo    # set up, then `servefleet up examples/config.yaml` on the "
        "embedded default (sqlite store, process runtime)\n"
        "scripts/test    # set up, then run every check and the whole test suite\n```\n")
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    assert {"docs/getting-started.md", "docs/figures.md", "docs/contributing.md"} <= linked
    assert all((ROOT / path).exists() for path in linked), linked
    assert "\n## Serve your own model\n" in readme
