"""What each role may see of deployment specs and of error texts.

A spec's `runtime.env` is where API keys live, and `user_config` may hold
credentials too (the reason only some roles may Watch config snapshots).
So:

- GetStatus, ListReplicas and the dashboard show no spec, and every error
  text they carry (build errors, replica failures, tracebacks that quote a
  variable) has the values of its application's environment replaced by
  `***` (`scrub`), for every caller.
- GetDeployment, ListDeployments and ListApplications show specs whole to
  roles that may write them (deployer, admin); to the others (reader, and the
  components' roles) each `runtime.env` value reads `***` (the names stay)
  and `user_config` is left out (`redacted_*`), and so is code sent by value
  (`by_value`: a pickled class and init args may hold whatever the script
  held, credentials included).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from servefleet.v1 import application_pb2, records_pb2

MASK = "***"
# Roles that see specs whole: they may write them anyway.
SEE_SECRETS = frozenset({"deployer", "admin"})
# Values shorter than this are not scrubbed from texts: "1" or "on" would
# mangle every message and reveal little.
MIN_SCRUBBED = 4


def scrub(text: str, values: Iterable[str]) -> str:
    """`text` with each of `values` (MIN_SCRUBBED characters or more) as MASK."""
    for value in sorted({v for v in values if len(v) >= MIN_SCRUBBED}, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    return text


def env_values(deployments: Iterable[records_pb2.DeploymentRecord],
               applications: Iterable[application_pb2.ApplicationRecord]
               ) -> dict[str, list[str]]:
    """The environment values of each application's specs, by application."""
    out: dict[str, list[str]] = {}
    for record in deployments:
        out.setdefault(record.spec.application, []).extend(record.spec.runtime.env.values())
    for app in applications:
        values = out.setdefault(app.spec.name, [])
        values.extend(app.spec.runtime.env.values())
        for override in app.spec.deployments:
            values.extend(override.runtime.env.values())
    return out


def _mask(env: Mapping[str, str]) -> dict[str, str]:
    return {name: MASK for name in env}


def redacted_deployment(record: records_pb2.DeploymentRecord
                        ) -> records_pb2.DeploymentRecord:
    out = records_pb2.DeploymentRecord()
    out.CopyFrom(record)
    masked = _mask(out.spec.runtime.env)
    out.spec.runtime.env.clear()
    out.spec.runtime.env.update(masked)
    out.spec.replica_config.user_config_json = ""
    out.spec.ClearField("by_value")
    return out


def redacted_application(record: application_pb2.ApplicationRecord
                         ) -> application_pb2.ApplicationRecord:
    out = application_pb2.ApplicationRecord()
    out.CopyFrom(record)
    values = env_values((), [record])[record.spec.name]
    for runtime in [out.spec.runtime, *(o.runtime for o in out.spec.deployments)]:
        masked = _mask(runtime.env)
        runtime.env.clear()
        runtime.env.update(masked)
    for override in out.spec.deployments:
        override.replica_config.user_config_json = ""
    out.build_error = scrub(out.build_error, values)
    return out
