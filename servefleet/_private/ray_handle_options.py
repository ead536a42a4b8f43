"""Ray Serve's handle options that servefleet accepts without acting on them
(`DeploymentHandle.options`), each said once per process when given a value
servefleet does not honour (option_notes.py):

- `_by_reference`: Ray passes a handle call's arguments and result through
  its object store by default (True), or inline with the call (False).
  servefleet has no object store: values always travel in the call itself,
  pickled (large buffers out of band), so False is what it does and True is
  noted;
- `use_new_handle_api`: True is the only API there is (Ray removed the old
  handles in 2.10); False is refused, as the API it asks for does not exist;
- `_prefer_local_routing`: Ray prefers replicas on the caller's node;
  servefleet's handles route by load over every replica (and by model or
  key, when asked), with no notion of nodes: noted, not used.

A value of the wrong type is a TypeError naming the option.
"""

from __future__ import annotations

from servefleet._private.configuration.option_notes import Note, Notes, default_notes


def note_handle_options(use_new_handle_api: bool | None, prefer_local_routing: bool | None,
                        by_reference: bool | None, notes: Notes | None = None) -> None:
    notes = notes or default_notes
    for name, value in (("use_new_handle_api", use_new_handle_api),
                        ("_prefer_local_routing", prefer_local_routing),
                        ("_by_reference", by_reference)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"DeploymentHandle.options({name}=...): expected True or False, "
                            f"got {value!r}")
    if use_new_handle_api is False:
        raise ValueError("DeploymentHandle.options(use_new_handle_api=False): the old handle "
                         "API is gone (as in Ray 2.10 and later); use DeploymentHandle")
    if by_reference:
        notes(Note("_by_reference", "DeploymentHandle.options(_by_reference=True): not used: "
                                    "there is no object store; arguments and results travel "
                                    "by value in the call itself", False))
    if prefer_local_routing is not None:
        notes(Note("_prefer_local_routing", "DeploymentHandle.options(_prefer_local_routing="
                                            f"{prefer_local_routing}): not used: handles route "
                                            "over every replica, with no notion of nodes",
                   False))
