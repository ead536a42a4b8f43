"""A function deployment that imports a module found only through PYTHONPATH
(tests/test_sandbox.py: runtime.env that acts at interpreter start)."""

from __future__ import annotations


def found(request) -> str:
    import only_on_pythonpath  # type: ignore[import-not-found]

    return only_on_pythonpath.VALUE
