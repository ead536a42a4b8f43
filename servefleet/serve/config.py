"""`servefleet.serve.config`: Ray Serve's config classes.

`AutoscalingConfig` goes to `@serve.deployment(autoscaling_config=...)` or
`.options(...)`; `HTTPOptions` and `gRPCOptions` to `serve.start`. Their
fields, defaults and checks are Ray Serve 2.x's. `autoscaling_options`
turns an AutoscalingConfig into the dict servefleet's deployment options
take (servefleet/_private/configuration/options.py): only the fields the user set, under
servefleet's names, so that a config file's values still layer over them.

Fields Ray has and servefleet does not act on are accepted and kept (so a
Ray program runs unchanged) and said so where they are: `HTTPOptions`'s
location, num_cpus, middlewares, root_url and ssl_* fields;
`AutoscalingConfig.smoothing_factor` becomes both scaling factors, as Ray's
does when upscaling_factor and downscaling_factor are unset.
"""

from __future__ import annotations

import warnings
from enum import StrEnum
from typing import Any, ClassVar

from ._options import OptionsModel, number

__all__ = [
    "AutoscalingConfig",
    "BackpressureConfig",
    "DeploymentActorConfig",
    "DeploymentMode",
    "HTTPOptions",
    "ProxyLocation",
    "autoscaling_options",
    "gRPCOptions",
]

DEFAULT_TARGET_ONGOING_REQUESTS = 2.0
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 9000


class AutoscalingConfig(OptionsModel):
    """How a deployment scales with its load (Ray Serve's fields and defaults).

    `target_num_ongoing_requests_per_replica` is the older name of
    `target_ongoing_requests`; it is accepted with a DeprecationWarning, as
    Ray does.
    """

    FIELDS: ClassVar[dict[str, Any]] = {
        "min_replicas": 1,
        "initial_replicas": None,
        "max_replicas": 1,
        "target_ongoing_requests": DEFAULT_TARGET_ONGOING_REQUESTS,
        "target_num_ongoing_requests_per_replica": None,
        "metrics_interval_s": 10.0,
        "look_back_period_s": 30.0,
        "smoothing_factor": 1.0,
        "upscale_smoothing_factor": None,
        "downscale_smoothing_factor": None,
        "upscaling_factor": None,
        "downscaling_factor": None,
        "downscale_delay_s": 600.0,
        "downscale_to_zero_delay_s": None,
        "upscale_delay_s": 30.0,
        "policy": None,
    }

    def __init__(self, **values: Any) -> None:
        if values.get("target_num_ongoing_requests_per_replica") is not None:
            warnings.warn("AutoscalingConfig: target_num_ongoing_requests_per_replica is "
                          "deprecated; use target_ongoing_requests", DeprecationWarning,
                          stacklevel=2)
            values.setdefault("target_ongoing_requests",
                              values["target_num_ongoing_requests_per_replica"])
        super().__init__(**values)

    def _validate(self) -> None:
        owner = "AutoscalingConfig"
        number(owner, "min_replicas", self.min_replicas, integer=True)
        number(owner, "max_replicas", self.max_replicas, minimum=1, integer=True)
        number(owner, "initial_replicas", self.initial_replicas, integer=True, optional=True)
        for name in ("target_ongoing_requests", "target_num_ongoing_requests_per_replica",
                     "metrics_interval_s", "look_back_period_s", "smoothing_factor",
                     "upscale_smoothing_factor", "downscale_smoothing_factor",
                     "upscaling_factor", "downscaling_factor"):
            number(owner, name, getattr(self, name), strict=True,
                   optional=name != "look_back_period_s" and name != "metrics_interval_s"
                   and name != "smoothing_factor")
        for name in ("downscale_delay_s", "downscale_to_zero_delay_s", "upscale_delay_s"):
            number(owner, name, getattr(self, name), optional=name == "downscale_to_zero_delay_s")
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"{owner}: max_replicas ({self.max_replicas}) must be >= "
                             f"min_replicas ({self.min_replicas})")
        initial = self.initial_replicas
        if initial is not None and not self.min_replicas <= initial <= self.max_replicas:
            raise ValueError(f"{owner}: initial_replicas ({initial}) must lie between "
                             f"min_replicas ({self.min_replicas}) and max_replicas "
                             f"({self.max_replicas})")
        if self.policy is not None and not (isinstance(self.policy, str) or callable(self.policy)):
            raise ValueError(f"{owner}.policy: expected an import path or a function, got "
                             f"{self.policy!r}")

    def get_target_ongoing_requests(self) -> float:
        return float(self.target_ongoing_requests)

    def get_upscaling_factor(self) -> float:
        return float(self.upscaling_factor or self.upscale_smoothing_factor
                     or self.smoothing_factor)

    def get_downscaling_factor(self) -> float:
        return float(self.downscaling_factor or self.downscale_smoothing_factor
                     or self.smoothing_factor)


# Ray's AutoscalingConfig fields servefleet's autoscaling_config takes as they are.
_SAME_NAME = ("min_replicas", "max_replicas", "initial_replicas", "target_ongoing_requests",
              "metrics_interval_s", "look_back_period_s", "upscale_delay_s",
              "downscale_delay_s", "downscale_to_zero_delay_s", "upscaling_factor",
              "downscaling_factor")


def autoscaling_options(config: AutoscalingConfig | dict[str, Any]) -> dict[str, Any]:
    """The autoscaling_config dict servefleet's options take (a dict passes
    through unchanged: servefleet/_private/configuration/options.py checks it)."""
    if isinstance(config, dict):
        return config
    given = config.explicit()
    out = {name: given[name] for name in _SAME_NAME if given.get(name) is not None}
    if "target_ongoing_requests" not in out and "target_num_ongoing_requests_per_replica" in given:
        out["target_ongoing_requests"] = given["target_num_ongoing_requests_per_replica"]
    for side in ("up", "down"):
        if f"{side}scaling_factor" in out:
            continue
        older = given.get(f"{side}scale_smoothing_factor") or given.get("smoothing_factor")
        if older is not None:
            out[f"{side}scaling_factor"] = older
    policy = given.get("policy")
    if policy is not None:
        out["policy"] = policy if isinstance(policy, str) else _import_path(policy)
    return out


def _import_path(function: Any) -> str:
    """A custom policy function as servefleet names it ("module:function")."""
    module, name = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    if not module or not name or "<" in name:
        raise ValueError(f"AutoscalingConfig.policy: {function!r} has no import path; define "
                         "it at the top level of a module")
    return f"{module}:{name}"


class DeploymentMode(StrEnum):
    """Where proxies run (Ray's older name for ProxyLocation)."""

    NoServer = "NoServer"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"


class ProxyLocation(StrEnum):
    """Where proxies run. servefleet's embedded cluster runs one proxy
    (HeadOnly and EveryNode mean the same on one machine); Disabled runs none."""

    Disabled = "Disabled"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"

    @classmethod
    def _to_deployment_mode(cls, location: ProxyLocation | str) -> DeploymentMode:
        location = ProxyLocation(location)
        if location is ProxyLocation.Disabled:
            return DeploymentMode.NoServer
        return DeploymentMode(location.value)


class HTTPOptions(OptionsModel):
    """The proxies' HTTP settings (Ray's fields and defaults). servefleet
    acts on host, port and request_timeout_s; the others are kept."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "host": DEFAULT_HTTP_HOST,
        "port": DEFAULT_HTTP_PORT,
        "middlewares": [],
        "location": DeploymentMode.HeadOnly,
        "num_cpus": 0,
        "root_url": "",
        "root_path": "",
        "request_timeout_s": None,
        "keep_alive_timeout_s": 5,
        "ssl_keyfile": None,
        "ssl_certfile": None,
        "ssl_keyfile_password": None,
        "ssl_ca_certs": None,
    }

    def _validate(self) -> None:
        if self.host is not None and not isinstance(self.host, str):
            raise ValueError(f"HTTPOptions.host: expected a string, got {self.host!r}")
        number("HTTPOptions", "port", self.port, integer=True)
        if self.port > 65535:
            raise ValueError(f"HTTPOptions.port: must be <= 65535, got {self.port}")
        number("HTTPOptions", "request_timeout_s", self.request_timeout_s, optional=True)
        if self.location is not None:
            object.__setattr__(self, "location", DeploymentMode(self.location))
        if self.host is None:  # Ray: no host means no HTTP server
            object.__setattr__(self, "location", DeploymentMode.NoServer)
        if bool(self.ssl_keyfile) != bool(self.ssl_certfile):
            raise ValueError("HTTPOptions: ssl_keyfile and ssl_certfile go together")


class gRPCOptions(OptionsModel):
    """The proxies' gRPC settings (Ray's fields and defaults)."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "port": DEFAULT_GRPC_PORT,
        "grpc_servicer_functions": [],
        "request_timeout_s": None,
    }

    def _validate(self) -> None:
        number("gRPCOptions", "port", self.port, integer=True)
        functions = self.grpc_servicer_functions
        if not isinstance(functions, list) or not all(isinstance(f, str) for f in functions):
            raise ValueError("gRPCOptions.grpc_servicer_functions: expected a list of import "
                             f"paths, got {functions!r}")
        number("gRPCOptions", "request_timeout_s", self.request_timeout_s, optional=True)


class BackpressureConfig(OptionsModel):
    """How a deployment's HTTP requests are refused once max_queued_requests
    wait already (Ray's fields and defaults): `status_code` 503 or 429, and a
    Retry-After header of `retry_after_s` seconds (rounded up) when set.
    gRPC calls refused so get RESOURCE_EXHAUSTED, handle calls raise
    BackPressureError, whatever it says (as in Ray)."""

    FIELDS: ClassVar[dict[str, Any]] = {"status_code": 503, "retry_after_s": None}

    def _validate(self) -> None:
        if self.status_code not in (503, 429) or isinstance(self.status_code, bool):
            raise ValueError(f"BackpressureConfig.status_code: must be 503 or 429, got "
                             f"{self.status_code!r}")
        number("BackpressureConfig", "retry_after_s", self.retry_after_s, optional=True)
        if self.retry_after_s is not None and self.retry_after_s == float("inf"):
            raise ValueError("BackpressureConfig.retry_after_s: must be finite")


class DeploymentActorConfig(OptionsModel):
    """One deployment-scoped actor (Ray's fields): `name`, `actor_class` (a
    class or its import path), its `init_args` and `init_kwargs`, and
    `actor_options` (max_concurrency; num_cpus, num_gpus, memory, resources,
    runtime_env as a deployment's ray_actor_options). It runs as a hidden
    deployment of one replica of the same application
    (servefleet/_private/ray_actors.py); `serve.get_deployment_actor(name)`
    in a replica is its handle."""

    FIELDS: ClassVar[dict[str, Any]] = {"name": None, "actor_class": None, "init_args": (),
                                        "init_kwargs": {}, "actor_options": {}}

    def _validate(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"DeploymentActorConfig.name: expected a name, got {self.name!r}")
        if self.actor_class is None:
            raise ValueError("DeploymentActorConfig.actor_class: give the actor's class (or "
                             "its import path)")
