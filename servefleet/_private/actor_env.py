"""How a deployment and its deployment-scoped actors (ray_actors.py) name
each other, in their runtime environments: what the SDK writes, the
replicas read (serve.get_deployment_actor) and the controller reads to keep
an old version's actors while that version's replicas run
(controller/reconcile/actor_retirement.py).

- A deployment with actors has ACTORS_ENV, a JSON object: actor name -> the
  name of the hidden deployment that runs it for this version of the
  deployment's code.
- Each such hidden deployment has ACTOR_OF_ENV: the name of its deployment
  (in the same application).

No imports beyond the standard library: the controller and the SDK both read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

ACTORS_ENV = "SERVEFLEET_DEPLOYMENT_ACTORS"
ACTOR_OF_ENV = "SERVEFLEET_ACTOR_OF"


def actors_env(actors: Mapping[str, str]) -> str:
    """ACTORS_ENV's value: actor name -> its deployment's name."""
    return json.dumps(dict(actors), sort_keys=True, separators=(",", ":"))


def actors_of(env: Mapping[str, str]) -> dict[str, str]:
    """A deployment's actors (actor name -> deployment name), from its
    environment; {} when it has none or the value is not such an object."""
    try:
        found = json.loads(env.get(ACTORS_ENV) or "{}")
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): str(v) for k, v in found.items()}


def parent_of(env: Mapping[str, str]) -> str:
    """The deployment an actor's deployment serves ("" when it is none's)."""
    return env.get(ACTOR_OF_ENV, "")
