"""What an HTTP handler's result becomes as JSON: FastAPI's `jsonable_encoder`
rules, which Ray Serve applies to a deployment's HTTP results, plus numpy as
Ray adds it.

- pydantic models: their JSON-mode dump; dataclass instances: their fields;
- mappings: dicts (keys encoded too); lists, tuples, sets, frozensets,
  deques and generators: lists;
- numpy arrays: nested lists; numpy scalars: the Python number;
- enums: their value; paths, UUIDs, IP addresses: str; datetimes, dates
  and times: ISO 8601; timedeltas: seconds as a float; Decimal: int when
  whole, else float; bytes: decoded as UTF-8;
- any other object: `dict(obj)`, else its `vars()`; else TypeError naming
  the type (the replica answers 500 with it).

numpy and pydantic are looked up only when already imported: a result
cannot be of their types otherwise, and the replica does not pay to import
them.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import ipaddress
import sys
import types
import uuid
from collections import deque
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

_AS_IS = (str, int, float, type(None))
_AS_LIST = (list, tuple, set, frozenset, deque, types.GeneratorType)
_AS_STR = (PurePath, uuid.UUID, ipaddress.IPv4Address, ipaddress.IPv6Address,
           ipaddress.IPv4Network, ipaddress.IPv6Network, ipaddress.IPv4Interface,
           ipaddress.IPv6Interface)


def jsonable(value: Any) -> Any:
    """`value` as JSON-ready data (dicts, lists, str, numbers, bool, None)."""
    if isinstance(value, _AS_IS):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {jsonable(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, _AS_LIST):
        return [jsonable(v) for v in value]
    special = _numpy(value)
    if special is not _NOT:
        return special
    special = _pydantic(value)
    if special is not _NOT:
        return special
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, _AS_STR):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode()
    try:
        return jsonable(dict(value))
    except Exception:
        pass
    try:
        return jsonable(vars(value))
    except TypeError:
        raise TypeError(f"a result of type {type(value).__name__} cannot be encoded as "
                        "JSON: return a str, bytes, a JSON-able value or a starlette "
                        "Response") from None


_NOT = object()


def _numpy(value: Any) -> Any:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return _NOT
    if isinstance(value, numpy.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, numpy.generic):
        return jsonable(value.item())
    return _NOT


def _pydantic(value: Any) -> Any:
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(value, pydantic.BaseModel):
        return _NOT
    dump = getattr(value, "model_dump", None)
    if dump is not None:  # pydantic 2
        return jsonable(dump(mode="json"))
    return jsonable(value.dict())  # pydantic 1
