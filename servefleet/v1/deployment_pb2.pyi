from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeploymentSpec(_message.Message):
    __slots__ = ("name", "application", "import_path", "init_args_json", "init_kwargs_json", "replica_config", "version", "prev_version", "route_prefix", "runtime", "grpc_servicer_functions", "grpc_services", "grpc_streaming_methods", "grpc_client_streaming_methods", "by_value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    IMPORT_PATH_FIELD_NUMBER: _ClassVar[int]
    INIT_ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    INIT_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    REPLICA_CONFIG_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREV_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROUTE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    GRPC_SERVICER_FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    GRPC_SERVICES_FIELD_NUMBER: _ClassVar[int]
    GRPC_STREAMING_METHODS_FIELD_NUMBER: _ClassVar[int]
    GRPC_CLIENT_STREAMING_METHODS_FIELD_NUMBER: _ClassVar[int]
    BY_VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    application: str
    import_path: str
    init_args_json: str
    init_kwargs_json: str
    replica_config: ReplicaConfig
    version: str
    prev_version: str
    route_prefix: str
    runtime: RuntimeOptions
    grpc_servicer_functions: _containers.RepeatedScalarFieldContainer[str]
    grpc_services: _containers.RepeatedScalarFieldContainer[str]
    grpc_streaming_methods: _containers.RepeatedScalarFieldContainer[str]
    grpc_client_streaming_methods: _containers.RepeatedScalarFieldContainer[str]
    by_value: CodeByValue
    def __init__(self, name: _Optional[str] = ..., application: _Optional[str] = ..., import_path: _Optional[str] = ..., init_args_json: _Optional[str] = ..., init_kwargs_json: _Optional[str] = ..., replica_config: _Optional[_Union[ReplicaConfig, _Mapping]] = ..., version: _Optional[str] = ..., prev_version: _Optional[str] = ..., route_prefix: _Optional[str] = ..., runtime: _Optional[_Union[RuntimeOptions, _Mapping]] = ..., grpc_servicer_functions: _Optional[_Iterable[str]] = ..., grpc_services: _Optional[_Iterable[str]] = ..., grpc_streaming_methods: _Optional[_Iterable[str]] = ..., grpc_client_streaming_methods: _Optional[_Iterable[str]] = ..., by_value: _Optional[_Union[CodeByValue, _Mapping]] = ...) -> None: ...

class CodeByValue(_message.Message):
    __slots__ = ("target", "init_args")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    INIT_ARGS_FIELD_NUMBER: _ClassVar[int]
    target: bytes
    init_args: bytes
    def __init__(self, target: _Optional[bytes] = ..., init_args: _Optional[bytes] = ...) -> None: ...

class ReplicaConfig(_message.Message):
    __slots__ = ("num_replicas", "max_ongoing_requests", "max_queued_requests", "user_config_json", "autoscaling_config", "graceful_shutdown_timeout_s", "graceful_shutdown_wait_loop_s", "health_check_period_s", "health_check_timeout_s", "resources", "startup_timeout_s", "retry_methods", "request_router", "request_router_kwargs_json", "backpressure")
    NUM_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    USER_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    AUTOSCALING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    GRACEFUL_SHUTDOWN_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    GRACEFUL_SHUTDOWN_WAIT_LOOP_S_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    RETRY_METHODS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ROUTER_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_FIELD_NUMBER: _ClassVar[int]
    num_replicas: int
    max_ongoing_requests: int
    max_queued_requests: int
    user_config_json: str
    autoscaling_config: AutoscalingConfig
    graceful_shutdown_timeout_s: float
    graceful_shutdown_wait_loop_s: float
    health_check_period_s: float
    health_check_timeout_s: float
    resources: Resources
    startup_timeout_s: float
    retry_methods: _containers.RepeatedScalarFieldContainer[str]
    request_router: str
    request_router_kwargs_json: str
    backpressure: BackpressureConfig
    def __init__(self, num_replicas: _Optional[int] = ..., max_ongoing_requests: _Optional[int] = ..., max_queued_requests: _Optional[int] = ..., user_config_json: _Optional[str] = ..., autoscaling_config: _Optional[_Union[AutoscalingConfig, _Mapping]] = ..., graceful_shutdown_timeout_s: _Optional[float] = ..., graceful_shutdown_wait_loop_s: _Optional[float] = ..., health_check_period_s: _Optional[float] = ..., health_check_timeout_s: _Optional[float] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., startup_timeout_s: _Optional[float] = ..., retry_methods: _Optional[_Iterable[str]] = ..., request_router: _Optional[str] = ..., request_router_kwargs_json: _Optional[str] = ..., backpressure: _Optional[_Union[BackpressureConfig, _Mapping]] = ...) -> None: ...

class BackpressureConfig(_message.Message):
    __slots__ = ("status_code", "retry_after_s")
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    status_code: int
    retry_after_s: float
    def __init__(self, status_code: _Optional[int] = ..., retry_after_s: _Optional[float] = ...) -> None: ...

class AutoscalingConfig(_message.Message):
    __slots__ = ("min_replicas", "max_replicas", "initial_replicas", "target_ongoing_requests", "upscale_delay_s", "downscale_delay_s", "metrics_interval_s", "look_back_period_s", "upscaling_factor", "downscaling_factor", "downscale_to_zero_delay_s", "aggregation_function", "policy")
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TARGET_ONGOING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    UPSCALE_DELAY_S_FIELD_NUMBER: _ClassVar[int]
    DOWNSCALE_DELAY_S_FIELD_NUMBER: _ClassVar[int]
    METRICS_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    LOOK_BACK_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    UPSCALING_FACTOR_FIELD_NUMBER: _ClassVar[int]
    DOWNSCALING_FACTOR_FIELD_NUMBER: _ClassVar[int]
    DOWNSCALE_TO_ZERO_DELAY_S_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    min_replicas: int
    max_replicas: int
    initial_replicas: int
    target_ongoing_requests: float
    upscale_delay_s: float
    downscale_delay_s: float
    metrics_interval_s: float
    look_back_period_s: float
    upscaling_factor: float
    downscaling_factor: float
    downscale_to_zero_delay_s: float
    aggregation_function: str
    policy: str
    def __init__(self, min_replicas: _Optional[int] = ..., max_replicas: _Optional[int] = ..., initial_replicas: _Optional[int] = ..., target_ongoing_requests: _Optional[float] = ..., upscale_delay_s: _Optional[float] = ..., downscale_delay_s: _Optional[float] = ..., metrics_interval_s: _Optional[float] = ..., look_back_period_s: _Optional[float] = ..., upscaling_factor: _Optional[float] = ..., downscaling_factor: _Optional[float] = ..., downscale_to_zero_delay_s: _Optional[float] = ..., aggregation_function: _Optional[str] = ..., policy: _Optional[str] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("num_cpus", "num_gpus", "memory_bytes", "custom")
    class CustomEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NUM_CPUS_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    num_cpus: float
    num_gpus: float
    memory_bytes: int
    custom: _containers.ScalarMap[str, float]
    def __init__(self, num_cpus: _Optional[float] = ..., num_gpus: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., custom: _Optional[_Mapping[str, float]] = ...) -> None: ...

class RuntimeOptions(_message.Message):
    __slots__ = ("working_dir", "env", "image", "excludes", "working_dir_digest", "placement")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDES_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    working_dir: str
    env: _containers.ScalarMap[str, str]
    image: str
    excludes: _containers.RepeatedScalarFieldContainer[str]
    working_dir_digest: str
    placement: Placement
    def __init__(self, working_dir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., image: _Optional[str] = ..., excludes: _Optional[_Iterable[str]] = ..., working_dir_digest: _Optional[str] = ..., placement: _Optional[_Union[Placement, _Mapping]] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("constraints", "spread")
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    SPREAD_FIELD_NUMBER: _ClassVar[int]
    constraints: _containers.RepeatedScalarFieldContainer[str]
    spread: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, constraints: _Optional[_Iterable[str]] = ..., spread: _Optional[_Iterable[str]] = ...) -> None: ...
