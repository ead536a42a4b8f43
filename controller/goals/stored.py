"""Records read back from the store are checked before anything acts on them.

A record is written only after validation, but the store may still hold one
that this controller cannot use: written by an older or a buggy version,
edited by hand, or damaged. Whatever is stored, a controller must start,
lead and serve (no poison pills): a record it cannot use is set aside with
the reason, shown as DEPLOY_FAILED in the status, and never acted on, while
every other record is loaded as usual. Deploying the same name again
replaces it; deleting it removes it from the store.

A deployment record is usable when it parses, names the deployment its key
names, and its spec passes the same validation as a Deploy
(spec.normalize_spec), whose normalised form (defaults filled in) is what
is loaded. An application record likewise
(app_specs.normalize_application). The deploy policy (working dirs,
images, env) is not re-applied here: a record may predate a policy change,
and replicas already running from it are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet._private.messages import error_summary
from servefleet.v1 import application_pb2, records_pb2

from ..errors import InvalidArgument
from .app_specs import normalize_application
from .spec import normalize_spec

MAX_REASON = 500


@dataclass(frozen=True)
class Unusable:
    """A stored record set aside: where it is and why it cannot be used."""

    key: str
    application: str
    name: str  # the deployment's name; "" for an application record
    reason: str

    @property
    def message(self) -> str:
        return (f"the stored record at {self.key} cannot be used: {self.reason}; deploy it "
                "again to replace it, or delete it")


def _short(text: str) -> str:
    line = error_summary(text)
    return line if len(line) <= MAX_REASON else line[:MAX_REASON - 3] + "..."


def _names(prefix: str, key: str, parts: int) -> list[str] | None:
    if not key.startswith(prefix):
        return None
    names = key[len(prefix):].split("/")
    return names if len(names) == parts and all(names) else None


def load_deployment(prefix: str, key: str, value: bytes,
                    ) -> tuple[records_pb2.DeploymentRecord | None, Unusable | None]:
    """The record at `key` (under `prefix`, the deployments' key prefix), or why
    it cannot be used. Exactly one of the two is None."""
    names = _names(prefix, key, 2)
    application, _, name = key[len(prefix):][:200].partition("/")
    record = records_pb2.DeploymentRecord()
    try:
        record.ParseFromString(value)
    except Exception as e:  # protobuf's DecodeError, or worse for hostile bytes
        return None, Unusable(key, application, name, f"unreadable ({type(e).__name__})")
    if names is None:
        return None, Unusable(key, application, name, "the key is not deployments/<app>/<name>")
    if (record.spec.application, record.spec.name) != (application, name):
        return None, Unusable(key, application, name,
                              f"it names {record.spec.application[:100]!r}/"
                              f"{record.spec.name[:100]!r}, not the deployment its key names")
    if not record.deleted:
        try:
            # Normalised, as a Deploy stores it: defaults filled in for fields
            # an older or hand-made record left at zero.
            record.spec.CopyFrom(normalize_spec(record.spec))
        except InvalidArgument as e:
            return None, Unusable(key, application, name, f"its spec is invalid: {_short(str(e))}")
    return record, None


def load_application(prefix: str, key: str, value: bytes,
                     ) -> tuple[application_pb2.ApplicationRecord | None, Unusable | None]:
    """The application record at `key`, or why it cannot be used."""
    names = _names(prefix, key, 1)
    name = names[0] if names else key[len(prefix):][:200]
    record = application_pb2.ApplicationRecord()
    try:
        record.ParseFromString(value)
    except Exception as e:
        return None, Unusable(key, name, "", f"unreadable ({type(e).__name__})")
    if names is None or record.spec.name != name:
        return None, Unusable(key, name, "", "it names another application than its key")
    if not record.deleted:
        try:
            normalize_application(record.spec, "spec")
        except InvalidArgument as e:
            return None, Unusable(key, name, "", f"its spec is invalid: {_short(str(e))}")
    return record, None
