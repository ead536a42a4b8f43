"""servefleet.serve's pure parts: the status mapping against made-up GetStatus
answers, Ray's config classes, the exception names, and @serve.deployment
with Ray's config objects."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from servefleet import serve
from servefleet._private.applications.api import graph_of
from servefleet._private.handle_errors import HandleError
from servefleet.serve import config, exceptions, schema
from servefleet.serve._status import to_serve_status
from servefleet.v1 import controller_pb2, status_pb2

DS = status_pb2.DeploymentStatus
AS = status_pb2.ApplicationStatus


def _response() -> controller_pb2.GetStatusResponse:
    return controller_pb2.GetStatusResponse(
        applications=[
            status_pb2.ApplicationStatusInfo(
                name="shop", status=AS.APPLICATION_STATUS_RUNNING, deployments=[
                    status_pb2.DeploymentStatusInfo(
                        name="Front", status=DS.DEPLOYMENT_STATUS_HEALTHY,
                        replica_states={"RUNNING": 2}),
                    status_pb2.DeploymentStatusInfo(
                        name="Model", status=DS.DEPLOYMENT_STATUS_UPSCALING,
                        replica_states={"RUNNING": 1, "STARTING": 2}, message="load 9")]),
            status_pb2.ApplicationStatusInfo(
                name="broken", status=AS.APPLICATION_STATUS_DEPLOY_FAILED,
                message="failed to deploy: M", deployments=[
                    status_pb2.DeploymentStatusInfo(
                        name="M", status=DS.DEPLOYMENT_STATUS_DEPLOY_FAILED,
                        message="ImportError: no module named m")]),
            status_pb2.ApplicationStatusInfo(
                name="old", status=AS.APPLICATION_STATUS_DELETING, deployments=[
                    status_pb2.DeploymentStatusInfo(
                        name="A", status=DS.DEPLOYMENT_STATUS_UPDATING,
                        replica_states={"STOPPING": 1, "SOMETHING_NEW": 1})]),
            status_pb2.ApplicationStatusInfo(name="fresh"),
        ],
        proxies=[status_pb2.ProxyStatus(id="proxy-1", address="127.0.0.1:8000", healthy=True),
                 status_pb2.ProxyStatus(id="", address="127.0.0.1:8001", healthy=False)])


def test_status_has_rays_shape_names_and_strings() -> None:
    status = to_serve_status(_response(), {"shop": 1700000000.5})
    assert isinstance(status, schema.ServeStatus)
    assert status.proxies == {"proxy-1": "HEALTHY", "127.0.0.1:8001": "UNHEALTHY"}
    shop = status.applications["shop"]
    assert isinstance(shop, schema.ApplicationStatusOverview)
    assert shop.status == "RUNNING" and shop.status is schema.ApplicationStatus.RUNNING
    assert shop.last_deployed_time_s == 1700000000.5
    front, model = shop.deployments["Front"], shop.deployments["Model"]
    assert isinstance(front, schema.DeploymentStatusOverview)
    assert (front.status, front.status_trigger) == ("HEALTHY", "CONFIG_UPDATE_COMPLETED")
    assert front.replica_states == {"RUNNING": 2}
    assert front.replica_states[schema.ReplicaState.RUNNING] == 2
    assert (model.status, model.status_trigger, model.message) == \
        ("UPSCALING", "AUTOSCALING", "load 9")
    broken = status.applications["broken"]
    assert (broken.status, broken.message) == ("DEPLOY_FAILED", "failed to deploy: M")
    assert broken.last_deployed_time_s == 0.0
    assert broken.deployments["M"].status_trigger == "REPLICA_STARTUP_FAILED"
    old = status.applications["old"].deployments["A"]
    assert (old.status, old.status_trigger) == ("UPDATING", "DELETING")
    assert old.replica_states == {"STOPPING": 1, "SOMETHING_NEW": 1}
    assert status.applications["fresh"].status == "NOT_STARTED"
    assert status.target_capacity is None


def test_every_servefleet_status_has_a_ray_name() -> None:
    for name in DS.keys():
        info = status_pb2.DeploymentStatusInfo(name="d", status=name)
        app = status_pb2.ApplicationStatusInfo(name="a", deployments=[info])
        out = to_serve_status(controller_pb2.GetStatusResponse(applications=[app]))
        assert out.applications["a"].deployments["d"].status in set(schema.DeploymentStatus)
    for name in AS.keys():
        app = status_pb2.ApplicationStatusInfo(name="a", status=name)
        out = to_serve_status(controller_pb2.GetStatusResponse(applications=[app]))
        assert out.applications["a"].status in set(schema.ApplicationStatus)


def test_an_empty_status_is_rays_default() -> None:
    assert to_serve_status(controller_pb2.GetStatusResponse()) == schema.ServeStatus()


def test_autoscaling_config_fields_defaults_and_checks() -> None:
    default = config.AutoscalingConfig()
    assert (default.min_replicas, default.max_replicas, default.target_ongoing_requests,
            default.upscale_delay_s, default.downscale_delay_s) == (1, 1, 2.0, 30.0, 600.0)
    given = config.AutoscalingConfig(min_replicas=0, max_replicas=4, smoothing_factor=2.0)
    assert given.dict(exclude_unset=True) == {"min_replicas": 0, "max_replicas": 4,
                                              "smoothing_factor": 2.0}
    assert config.autoscaling_options(given) == {"min_replicas": 0, "max_replicas": 4,
                                                 "upscaling_factor": 2.0,
                                                 "downscaling_factor": 2.0}
    with pytest.raises(ValueError, match=r"max_replicas \(1\) must be >= min_replicas \(3\)"):
        config.AutoscalingConfig(min_replicas=3)
    with pytest.raises(ValueError, match="initial_replicas"):
        config.AutoscalingConfig(max_replicas=2, initial_replicas=5)
    with pytest.raises(ValueError, match="target_ongoing_requests: must be > 0"):
        config.AutoscalingConfig(target_ongoing_requests=0)
    with pytest.raises(TypeError, match="unknown field 'max_replica'"):
        config.AutoscalingConfig(max_replica=3)


def test_the_older_autoscaling_key_is_accepted_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="target_ongoing_requests"):
        older = config.AutoscalingConfig(max_replicas=3,
                                         target_num_ongoing_requests_per_replica=5)
    assert older.get_target_ongoing_requests() == 5
    assert config.autoscaling_options(older) == {"max_replicas": 3, "target_ongoing_requests": 5}


def test_http_and_grpc_options() -> None:
    http = config.HTTPOptions(port=8123)
    assert (http.host, http.port, http.location) == ("127.0.0.1", 8123, "HeadOnly")
    assert config.HTTPOptions.parse_obj({"host": None}).location == "NoServer"
    with pytest.raises(ValueError, match="port"):
        config.HTTPOptions(port="80")
    with pytest.raises(ValueError, match="port"):
        http.port = 70000  # checked on assignment too, as Ray's
    grpc = config.gRPCOptions(grpc_servicer_functions=["pkg.mod_pb2_grpc.add_XServicer_to_server"])
    assert grpc.port == 9000
    with pytest.raises(ValueError, match="grpc_servicer_functions"):
        config.gRPCOptions(grpc_servicer_functions="one")
    assert config.ProxyLocation._to_deployment_mode("Disabled") is config.DeploymentMode.NoServer


def test_exception_names_and_the_handle_error_mapping() -> None:
    overloaded = exceptions.from_handle_error(HandleError("Model is overloaded: 10 queued", 503))
    assert isinstance(overloaded, exceptions.BackPressureError)
    assert isinstance(overloaded, exceptions.RayServeException)
    assert isinstance(overloaded, HandleError) and overloaded.status == 503
    gone = exceptions.from_handle_error(HandleError("no replica of M took the call", 503))
    assert isinstance(gone, exceptions.DeploymentUnavailableError)
    failed = HandleError("M.__call__: ValueError: bad", 500)
    assert exceptions.from_handle_error(failed) is failed
    assert "cancelled" in str(exceptions.RequestCancelledError("r1"))
    assert issubclass(exceptions.RequestCancelledError, exceptions.RayServeException)


def test_deployment_takes_rays_config_objects_in_the_decorator_and_in_options() -> None:
    @serve.deployment(autoscaling_config=config.AutoscalingConfig(min_replicas=1,
                                                                  max_replicas=5))
    class Model:
        pass

    assert Model.options_dict["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 5}
    more = Model.options(autoscaling_config=config.AutoscalingConfig(max_replicas=9),
                         name="Big")
    again = more.options(autoscaling_config=config.AutoscalingConfig(max_replicas=7))
    assert again.name == "Big"
    assert again.options_dict["autoscaling_config"] == {"max_replicas": 7}
    graph = graph_of(again.bind())  # the options are JSON: they travel to the controller
    assert graph["deployments"][0]["options"]["autoscaling_config"] == {"max_replicas": 7}


def test_public_modules_say_what_they_export(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (serve, serve.config, serve.schema, serve.exceptions, serve.handle):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)
    monkeypatch.delenv("SERVEFLEET_CONTROLLER", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert serve.status() == schema.ServeStatus()  # nothing runs: Ray's empty status


def test_a_bare_import_starlette_reaches_requests_as_after_rays_import() -> None:
    """Ray's documentation annotates `starlette.requests.Request` after only
    `import starlette`: Ray's import loads that submodule, and so does ours
    (a fresh interpreter: pytest itself has imported starlette's modules)."""
    program = ("import starlette\n"
               "from servefleet import serve\n"
               "async def handler(request: starlette.requests.Request)"
               " -> starlette.responses.Response: ...\n"
               "print(handler.__annotations__['request'].__module__)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "starlette.requests"


def test_config_file_schema_classes_build_and_check_a_config() -> None:
    built = schema.ServeDeploySchema(applications=[schema.ServeApplicationSchema(
        name="app", import_path="model:app", route_prefix="/app",
        deployments=[schema.DeploymentSchema(name="Model", num_replicas=2)])])
    assert built.dict(exclude_unset=True) == {"applications": [{
        "name": "app", "import_path": "model:app", "route_prefix": "/app",
        "deployments": [{"name": "Model", "num_replicas": 2}]}]}
    parsed = schema.ServeDeploySchema.parse_obj(
        {"applications": [{"import_path": "pkg.mod.app", "route_prefix": None}]})
    assert parsed.applications[0].name == "default"  # Ray's default name
    with pytest.raises(ValueError, match="num_replicas: expected an integer"):
        schema.DeploymentSchema(name="M", num_replicas="two")
    with pytest.raises(ValueError, match="'a' is used twice"):
        schema.ServeDeploySchema(applications=[{"name": "a", "import_path": "m:a"},
                                               {"name": "a", "import_path": "m:b"}])
    with pytest.raises(ValueError, match="import_path: required"):
        schema.ServeApplicationSchema(name="a")
    with pytest.raises(ValueError, match="route_prefix"):
        schema.ServeApplicationSchema(import_path="m:a", route_prefix="no-slash")
