"""The table of a deployment's options: every key, its type, bounds and help.

What `@deployment(...)`, `.options(...)` and a config file's `deployments[]`
entries accept (servefleet/_private/configuration/field_table.py says how a table is read). The
parsers take their key lists and plain checks from here (options.py for
servefleet's own options, ray_options.py and ray_runtime_env.py for Ray
Serve's), and config_schema.py writes the same table as JSON Schema, so an
option is added in one place. The order of each section is the order its
"unknown key (expected one of ...)" error lists.
"""

from __future__ import annotations

from servefleet._private.configuration.field_table import Field, Section

# Bounds of the integer options, shared with the controller's validation.
MAX_REPLICAS = 10_000
MAX_ONGOING = 100_000
MAX_QUEUED = 1_000_000
MAX_BYTES = 2**50

# Ray Serve's LoggingConfig: checked for its keys, not used.
LOGGING = Section("logging_config", "Ray Serve's LoggingConfig: accepted and not used.", (
    Field("encoding", "any", "Ray: TEXT or JSON."),
    Field("log_level", "any", "Ray: the level of Serve's loggers."),
    Field("logs_dir", "any", "Ray: where the log files go."),
    Field("enable_access_log", "any", "Ray: log a line per request."),
    Field("additional_log_standard_attrs", "any", "Ray: more LogRecord attributes to log."),
))

PLACEMENT = Section("placement", "Where a Swarm service's replicas may run.", (
    Field("constraints", "str_list", "Swarm placement constraints, e.g. "
          "'node.labels.gpu == true'.", nullable=True),
    Field("spread", "str_list", "Swarm placement preferences: spread the replicas over the "
          "values of these node labels.", nullable=True),
))

RUNTIME = Section("runtime", "Where a replica's code is and what its process gets.", (
    Field("working_dir", "str", "The directory of the code, put first on sys.path; in a "
          "config file relative to the file. Its files are part of the code's version."),
    Field("env", "mapping", "Environment variables of the replicas' processes.",
          values="str"),
    Field("image", "str", "The Docker image the replicas run (the Docker and Swarm "
          "runtimes)."),
    Field("excludes", "str_list", "Patterns of files under working_dir that are not code "
          "(left out of its hash).", nullable=True, items="patterns"),
    Field("placement", "section", "Swarm placement of the replicas.", nullable=True,
          section=PLACEMENT),
))

RESOURCES = Section("resources", "What one replica needs of its host: limits for Docker "
                    "and Swarm replicas (the process runtime sets none).", (
    Field("num_cpus", "non_negative", "CPUs (a hard limit in Docker)."),
    Field("num_gpus", "non_negative", "GPUs."),
    Field("memory_bytes", "int", "Memory in bytes.", bounds=(0, MAX_BYTES)),
))

_POLICY = {"anyOf": [
    {"type": "string"},
    {"type": "object", "description": "Ray's AutoscalingPolicy.",
     "properties": {"name": {"type": "string"}}, "required": ["name"],
     "additionalProperties": False}]}

AUTOSCALING = Section("autoscaling_config", "Scale the replicas with the load, by Ray "
                      "Serve's rules and names (instead of a fixed num_replicas).", (
    Field("min_replicas", "int", "The fewest replicas (0: scale to zero). Default 1.",
          bounds=(0, MAX_REPLICAS), nullable=True),
    Field("max_replicas", "int", "The most replicas. Default 1.", bounds=(1, MAX_REPLICAS),
          nullable=True),
    Field("initial_replicas", "int", "The replicas of the first deploy.",
          bounds=(0, MAX_REPLICAS), nullable=True),
    Field("target_ongoing_requests", "number", "The load per replica to aim for. "
          "Default 2.", nullable=True),
    Field("upscale_delay_s", "number", "How long the load must ask for more before the "
          "target rises. Default 30.", nullable=True),
    Field("downscale_delay_s", "number", "How long the load must ask for fewer before the "
          "target falls. Default 600.", nullable=True),
    Field("metrics_interval_s", "number", "Accepted for Ray Serve configs: load is reported "
          "every 0.5 s. Default 10.", nullable=True),
    Field("look_back_period_s", "number", "The window the load is combined over. "
          "Default 30.", nullable=True),
    Field("upscaling_factor", "number", "Scales each step up. Default 1.", nullable=True),
    Field("downscaling_factor", "number", "Scales each step down. Default 1.",
          nullable=True),
    Field("downscale_to_zero_delay_s", "number", "How much longer before the last replica "
          "goes (default: downscale_delay_s).", nullable=True),
    Field("aggregation_function", "str", "How the load is combined over the window: mean "
          "(the default), max or min.", nullable=True),
    Field("policy", "str", "A custom policy, 'module:function' in the working_dir.",
          nullable=True, schema=_POLICY),
    Field("target_num_ongoing_requests_per_replica", "number", "", nullable=True,
          renamed_to="target_ongoing_requests"),
    Field("upscale_smoothing_factor", "number", "", nullable=True,
          renamed_to="upscaling_factor"),
    Field("downscale_smoothing_factor", "number", "", nullable=True,
          renamed_to="downscaling_factor"),
    Field("smoothing_factor", "number", "", nullable=True,
          ray="deprecated: both upscaling_factor and downscaling_factor, where not given"),
    Field("prometheus_metrics", "str_list", "", nullable=True, items="metric names",
          unused="the autoscaling policy sees the load servefleet measures"),
), exclusive=(("target_ongoing_requests", "target_num_ongoing_requests_per_replica"),
              ("upscaling_factor", "upscale_smoothing_factor"),
              ("downscaling_factor", "downscale_smoothing_factor")))

_NO_PACKAGES = ("servefleet installs no packages: install them into the replicas' Python "
                "environment or image (runtime.image), then remove this key")
RUNTIME_ENV = Section("runtime_env", "Ray Serve's runtime_env, as servefleet's runtime: "
                      "working_dir (a local directory), env_vars, excludes, image_uri.", (
    Field("working_dir", "str", "A local directory (servefleet downloads no code).",
          nullable=True, ray="read as runtime.working_dir",
          schema={"type": "string", "not": {"pattern": "://"}}),
    Field("env_vars", "mapping", "Environment variables.", nullable=True, values="str",
          ray="read as runtime.env"),
    Field("excludes", "str_list", "Patterns of files that are not code.", nullable=True,
          items="patterns", ray="read as runtime.excludes"),
    Field("image_uri", "str", "The image the replicas run.", nullable=True,
          ray="read as runtime.image"),
    Field("config", "mapping", "", nullable=True,
          unused="servefleet's runtime has no setup timeout or eager install to configure"),
    Field("pip", "refused", _NO_PACKAGES),
    Field("conda", "refused", "servefleet creates no conda environments: run the controller "
          "in one, or use an image (runtime.image), then remove this key"),
    Field("uv", "refused", _NO_PACKAGES),
    Field("py_modules", "refused", "servefleet ships no modules: put them in the "
          "working_dir or the image"),
    Field("container", "refused", "use runtime.image (the Docker runtime) instead"),
    Field("py_executable", "refused", "replicas run with the controller's Python (or the "
          "image's)"),
    Field("java_jars", "refused", "servefleet runs Python replicas only"),
))

RAY_ACTOR = Section("ray_actor_options", "Ray Serve's actor options: runtime_env and "
                    "num_gpus are used, num_cpus sets the CPU threads, the rest are not "
                    "used.", (
    Field("accelerator_type", "str", "", nullable=True,
          unused="servefleet does not pick nodes by accelerator type "
                 "(use runtime.placement constraints on Swarm)"),
    Field("memory", "non_negative", "", nullable=True,
          unused="Ray's memory is a logical amount, for its scheduler; servefleet "
                 "reserves none"),
    Field("num_cpus", "non_negative", "", nullable=True,
          ray="sets the replica's CPU threads (OMP_NUM_THREADS, rounded up), not a limit"),
    Field("num_gpus", "non_negative", "", nullable=True, ray="read as resources.num_gpus"),
    Field("resources", "mapping", "", nullable=True, values="non_negative",
          unused="servefleet has no custom resources to schedule by"),
    Field("runtime_env", "section", "", nullable=True, section=RUNTIME_ENV,
          ray="read as the deployment's runtime"),
))

ROUTER_CONFIG = Section("request_router_config", "Ray Serve's RequestRouterConfig: its "
                        "class and kwargs become request_router and request_router_kwargs.", (
    Field("request_router_class", "str", "", nullable=True, ray="read as request_router (Ray's "
          "PowerOfTwoChoicesRequestRouter and PrefixCacheAffinityRouter are power_of_two "
          "and prefix_affinity)"),
    Field("request_router_kwargs", "mapping", "", nullable=True,
          ray="read as request_router_kwargs"),
    *(Field(name, "any", "", ray="accepted and not used")
      for name in ("initial_backoff_s", "backoff_multiplier", "max_backoff_s",
                   "request_routing_stats_period_s", "request_routing_stats_timeout_s")),
))

BACKPRESSURE = Section("backpressure_config", "How a proxy answers an HTTP request refused "
                       "because max_queued_requests are already waiting (Ray Serve's "
                       "BackpressureConfig); gRPC calls get RESOURCE_EXHAUSTED and handle "
                       "calls BackPressureError whatever it says.", (
    Field("status_code", "int", "503 (the default) or 429.", choices=(503, 429),
          bounds=(429, 503), nullable=True),
    Field("retry_after_s", "non_negative", "When set, a Retry-After header of these "
          "seconds, rounded up.", nullable=True),
))

_BUNDLES = {"type": "array", "minItems": 1, "items": {
    "type": "object", "propertyNames": {"type": "string"},
    "additionalProperties": {"type": "number", "minimum": 0}}}
# Ray's rule for a route prefix, as a regular expression (re.search, as JSON Schema reads it).
ROUTE_PREFIX_PATTERN = r"^/([^{}]*[^{}/])?$"

# servefleet's own options first (SERVEFLEET_OPTIONS), then Ray Serve's.
DEPLOYMENT_OPTIONS = Section("deployment_options", "A deployment's options.", (
    Field("num_replicas", "int", "How many replicas run ('auto': autoscaling with Ray's "
          "defaults). Default 1.", bounds=(0, MAX_REPLICAS), also=("auto",), nullable=True),
    Field("max_ongoing_requests", "int", "Requests one replica serves at once; more wait. "
          "Default 5.", bounds=(1, MAX_ONGOING)),
    Field("max_queued_requests", "int", "Requests that may wait for a replica (-1: no "
          "limit). Default -1.", bounds=(-1, MAX_QUEUED)),
    Field("health_check_period_s", "number", "Seconds between calls of check_health(). "
          "Default 10."),
    Field("health_check_timeout_s", "number", "A health check not answered within this "
          "long failed. Default 30."),
    Field("graceful_shutdown_timeout_s", "number", "A draining replica is killed after "
          "this long. Default 20."),
    Field("graceful_shutdown_wait_loop_s", "number", "A draining replica serves this long "
          "(callers that have not yet heard of the stop), then refuses new requests and "
          "checks this often for requests in flight. Default 2."),
    Field("startup_timeout_s", "number", "A constructor not done after this long is a "
          "failed start. Default 300."),
    Field("user_config", "json", "Passed to reconfigure(); a change is applied without a "
          "restart.", nullable=True),
    Field("autoscaling_config", "section", "Scale with the load instead of num_replicas.",
          nullable=True, section=AUTOSCALING),
    Field("version", "str", "The code's version: a change rolls the replicas out.",
          nullable=True),
    Field("runtime", "section", "Where the code is, its environment variables, image and "
          "placement (over the application's runtime).", nullable=True, section=RUNTIME),
    Field("retry_methods", "str_list", "HTTP methods a proxy may send to another replica "
          "when one fails.", nullable=True, items="HTTP methods"),
    Field("resources", "section", "What one replica needs of its host.", nullable=True,
          section=RESOURCES),
    Field("request_router", "str", "How requests pick a replica: power_of_two, "
          "prefix_affinity or 'module:Class' (docs/routing.md).", nullable=True),
    Field("request_router_kwargs", "mapping", "Arguments of the request router.",
          nullable=True),
    Field("backpressure_config", "section", "The HTTP answer to requests refused past "
          "max_queued_requests: 503 or 429, and a Retry-After.", nullable=True,
          section=BACKPRESSURE),
    Field("route_prefix", "str", "", nullable=True, schema={
        "type": "string", "pattern": ROUTE_PREFIX_PATTERN},
        ray="deprecated on a deployment: give route_prefix to the application; a prefix "
            "starts with '/', ends without one (unless it is '/') and holds no '{' or '}'"),
    Field("max_concurrent_queries", "int", "", bounds=(1, MAX_ONGOING),
          renamed_to="max_ongoing_requests"),
    Field("ray_actor_options", "section", "", nullable=True, section=RAY_ACTOR,
          ray="runtime_env, num_gpus and num_cpus are used; the rest is not"),
    Field("request_router_config", "section", "", nullable=True, section=ROUTER_CONFIG,
          ray="read as request_router and request_router_kwargs"),
    Field("deployment_actors", "refused", "give deployment_actors in code "
          "(@serve.deployment(deployment_actors=[...])), where each actor becomes a hidden "
          "deployment of one replica; a config file cannot name an actor's class",
          ray="in code only"),
    Field("placement_group_bundles", "any", "", nullable=True, schema=_BUNDLES,
          unused="servefleet has no placement groups (each replica is a process or "
                 "container; see runtime.placement on Swarm)"),
    Field("placement_group_strategy", "str", "", nullable=True,
          choices=("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
          unused="servefleet has no placement groups"),
    Field("max_replicas_per_node", "int", "", nullable=True, bounds=(1, 100),
          unused="placement belongs to the runtime (runtime.placement on Swarm)"),
    Field("logging_config", "section", "", nullable=True, section=LOGGING,
          unused="replicas log as the controller's --log-format says"),
    Field("max_constructor_retry_count", "int", "", nullable=True, bounds=(0, 1_000_000),
          unused="failed replica starts are retried with backoff"),
), exclusive=(("max_ongoing_requests", "max_concurrent_queries"),
              ("runtime", "ray_actor_options.runtime_env"),
              ("resources", "ray_actor_options.num_gpus"),
              ("placement_group_bundles", "max_replicas_per_node")),
   needs=(("placement_group_strategy", "placement_group_bundles"),))

SERVEFLEET_OPTIONS = tuple(f.name for f in DEPLOYMENT_OPTIONS.fields if not f.is_ray)
