"""Code and init args by value (servefleet/_private/applications/by_value.py) and the specs of a
local run (servefleet/_private/local/specs.py): pure logic, no processes.

What a run of a script does end to end is tests/test_local_script.py's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from servefleet._private.applications import by_value
from servefleet._private.applications.api import deployment, graph_of
from servefleet._private.configuration.options import OptionError
from servefleet._private.local.specs import application_specs, route_of, working_dir
from servefleet.controller.api.redact import redacted_deployment
from servefleet.controller.errors import InvalidArgument, PermissionDenied
from servefleet.controller.goals.policy import DeployPolicy
from servefleet.controller.goals.spec import code_hash, normalize_spec
from servefleet.replica.loader import LoadError, unpickle_target
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import records_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent / "apps"))

import local_app


class Weights:
    """A custom object among init args (importable: this module)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _local_deployments():
    """Deployments defined in a function: not importable back, so by value."""

    @deployment
    class Model:
        def __init__(self, weights: Weights, helper) -> None:
            self.weights, self.helper = weights, helper

    @deployment(route_prefix="/model")
    class Ingress:
        def __init__(self, model) -> None:
            self.model = model

    @deployment
    def helper() -> str:
        return "help"

    return Model, Ingress, helper


def test_what_cannot_be_imported_back_goes_by_value() -> None:
    model, _, helper = _local_deployments()
    assert by_value.is_by_value(model.func_or_class)
    assert by_value.is_by_value(helper.func_or_class)
    assert not by_value.is_by_value(Weights)
    # A @deployment at module level: the module's attribute wraps the class.
    assert not by_value.is_by_value(local_app.Doubler.func_or_class)


def test_init_args_keep_arrays_objects_and_handles_anywhere() -> None:
    _, _, helper = _local_deployments()
    bound = helper.bind()
    markers = {id(bound): {"deployment": "helper"}}
    data = by_value.dumps_init((Weights(np.arange(4.0)), {"h": [bound]}), {"k": bound},
                               lambda obj: markers.get(id(obj)), "deployment Model")
    args, kwargs = by_value.loads_init(data, lambda marker: ("handle", marker["deployment"]))
    np.testing.assert_array_equal(args[0].array, np.arange(4.0))
    assert args[1] == {"h": [("handle", "helper")]} and kwargs == {"k": ("handle", "helper")}


def test_a_graph_by_value_pickles_what_it_must_and_keeps_json_where_it_can() -> None:
    model, ingress, helper = _local_deployments()
    graph = graph_of(ingress.bind(model.bind(Weights(np.ones(3)), helper.bind())),
                     by_value=True)
    nodes = {n["name"]: n for n in graph["deployments"]}
    assert graph["ingress"] == "Ingress" and set(nodes) == {"Ingress", "Model", "helper"}
    assert nodes["Model"]["import_path"] == "__main__:Model"
    target = by_value.loads_target(nodes["Model"]["by_value_target"])
    assert target.__name__ == "Model"
    args, _ = by_value.loads_init(nodes["Model"]["by_value_init_args"], lambda m: m)
    assert args[1] == {"deployment": "helper"}  # the handle's placeholder
    np.testing.assert_array_equal(args[0].array, np.ones(3))
    # An importable class with JSON args stays as it was: import path, JSON.
    graph = graph_of(local_app.app, by_value=True)
    assert all("by_value_target" not in n and "by_value_init_args" not in n
               for n in graph["deployments"])
    # Without by_value (config files, the CLI), a non-JSON argument is refused.
    with pytest.raises(OptionError, match="cannot travel as JSON"):
        graph_of(local_app.Doubler.bind(Weights(np.ones(1))))


def test_too_large_by_value_is_refused_naming_the_deployment() -> None:
    model, _, _ = _local_deployments()
    big = Weights(np.zeros(by_value.MAX_BY_VALUE_BYTES // 8 + 1))
    with pytest.raises(by_value.ByValueError, match=r"deployment Model: .* bytes"):
        graph_of(model.bind(big, None), by_value=True)


def test_route_prefix_run_then_ingress_option_then_root() -> None:
    model, ingress, helper = _local_deployments()
    app = ingress.bind(model.bind(Weights(np.ones(1)), helper.bind()))
    assert route_of(app, "/given") == "/given"
    assert route_of(app, None) == "/model"
    assert route_of(model.bind(None, None), None) == "/"
    assert route_of(ingress.options(route_prefix=None).bind(None), None) is None
    with pytest.raises(ValueError, match="only the ingress deployment"):
        route_of(model.bind(None, ingress.bind(None)), None)
    with pytest.raises(OptionError, match="route_prefix must be a path"):
        ingress.options(route_prefix="model")


def test_application_specs_carry_the_pickles_and_the_scripts_dir() -> None:
    model, ingress, helper = _local_deployments()
    specs = application_specs(ingress.bind(model.bind(Weights(np.ones(2)), helper.bind())),
                              "app", None)
    assert [s.name for s in specs] == ["Ingress", "Model", "helper"]
    assert specs[0].route_prefix == "/model" and not specs[1].HasField("route_prefix")
    assert all(s.by_value.target and s.by_value.init_args for s in specs)
    assert all(not s.init_args_json and not s.init_kwargs_json for s in specs)
    assert specs[0].runtime.working_dir == str(Path(__file__).resolve().parent)
    assert working_dir("local_app") == str(Path(local_app.__file__).resolve().parent)


def _by_value_spec(target: bytes = b"code", init: bytes = b"") -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(name="m", import_path="__main__:Model",
                              by_value=dpb.CodeByValue(target=target, init_args=init))


def test_the_spec_bounds_pickles_and_versions_them() -> None:
    spec = normalize_spec(_by_value_spec(b"one"))
    assert code_hash(spec) != code_hash(normalize_spec(_by_value_spec(b"two")))
    assert code_hash(spec) != code_hash(normalize_spec(_by_value_spec(b"one", b"args")))
    with pytest.raises(InvalidArgument, match=r"spec\.by_value: must be at most"):
        normalize_spec(_by_value_spec(b"x" * (by_value.MAX_BY_VALUE_BYTES + 1)))
    both = _by_value_spec(b"c", b"args")
    both.init_args_json = "[1]"
    with pytest.raises(InvalidArgument, match=r"spec\.by_value\.init_args: must be unset"):
        normalize_spec(both)
    # An empty by_value is none at all: the same spec as without it.
    assert normalize_spec(_by_value_spec(b"")) == normalize_spec(
        dpb.DeploymentSpec(name="m", import_path="__main__:Model"))


def test_the_policy_runs_code_by_value_only_with_the_flag() -> None:
    refusing = DeployPolicy.build(loopback=True, cwd="/tmp", default_image="i",
                                  working_dirs=["/"])
    for spec in (_by_value_spec(b"code"), _by_value_spec(b"", b"args")):
        with pytest.raises(PermissionDenied, match="--allow-code-by-value"):
            refusing.check_deployment("spec", spec)
    allowing = DeployPolicy.build(loopback=True, cwd="/tmp", default_image="i",
                                  working_dirs=["/"], allow_code_by_value=True)
    # By value, the import path is a name only: `__main__` is not refused.
    allowing.check_deployment("spec", _by_value_spec(b"code"))
    with pytest.raises(PermissionDenied, match="__main__"):
        allowing.check_deployment("spec", dpb.DeploymentSpec(name="m",
                                                             import_path="__main__:Model"))



def test_readers_do_not_see_what_was_sent_by_value() -> None:
    # A pickled class carries the globals it uses, credentials included.
    record = records_pb2.DeploymentRecord(spec=_by_value_spec(b"code", b"args"))
    assert not redacted_deployment(record).spec.HasField("by_value")
    assert record.spec.by_value.target == b"code"  # the original is untouched


def test_a_replica_says_why_code_sent_by_value_does_not_load() -> None:
    with pytest.raises(LoadError, match="cannot be loaded here"):
        unpickle_target(b"\x80\x05garbage")
