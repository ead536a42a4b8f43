"""Unit tests of the handle hop's framing (servefleet/_private/handles/values.py), the
argument resolution and error rebuilding of handles, and the HTTP result
encoding (replica/jsonable.py, answers.takes_request)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import pickle
import threading
import uuid

import numpy as np
import pydantic
import pytest

from servefleet import HandleError
from servefleet._private import replica_context
from servefleet._private.handles import values
from servefleet._private.handles.handle import DeploymentHandle, call_frame
from servefleet._private.handles.handle_router import remote_error
from servefleet._private.handles.responses import DeploymentResponse
from servefleet.replica.answers import plain_answer, takes_request, to_response
from servefleet.replica.jsonable import jsonable


def joined(parts: list) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_arrays_travel_out_of_band_and_arrive_over_the_body() -> None:
    big = np.arange(1 << 18, dtype=np.float32)  # 1 MB
    parts = values.frame({"a": big, "small": np.arange(3)})
    # The array's own memory is one of the segments: not copied into the pickle.
    assert any(memoryview(p).nbytes == big.nbytes and
               np.shares_memory(np.frombuffer(p, np.float32), big) for p in parts)
    assert sum(memoryview(p).nbytes for p in parts[:2]) < 4096
    body = joined(parts)
    magic, got = values.load(body)
    assert magic == values.VALUE_MAGIC and np.array_equal(got["a"], big)
    assert np.array_equal(got["small"], np.arange(3))
    # Built over the received bytes, 8-byte aligned, without another copy.
    whole = np.frombuffer(body, np.uint8)
    assert np.shares_memory(got["a"], whole) and got["a"].ctypes.data % 8 == 0
    # Small values are one segment, sent as one write.
    assert len(values.frame({"k": [1, 2, 3]})) == 1


def test_bad_frames_are_refused_by_name() -> None:
    with pytest.raises(values.FrameError, match="shorter than its header"):
        values.load(b"SF")
    with pytest.raises(values.FrameError, match="not a servefleet value frame"):
        values.load(b'{"args": []}')
    with pytest.raises(values.FrameError, match="shorter than its segments"):
        values.load(joined(values.frame(np.arange(10000)))[:-100])


def test_streams_split_into_whole_frames_as_bytes_arrive() -> None:
    stream = b"".join(joined(values.stream_item(values.frame(i))) for i in range(3))
    pending, got = bytearray(), []
    for i in range(0, len(stream), 7):  # arriving 7 bytes at a time
        pending += stream[i:i + 7]
        got += [values.load(raw)[1] for raw in values.split_stream(pending)]
    assert got == [0, 1, 2] and not pending


class Odd(Exception):
    pass


def test_errors_come_back_as_their_type_or_as_a_handle_error() -> None:
    try:
        raise Odd("strange")
    except Odd as e:
        raw = values.error_frame(e, "Traceback: in there\nOdd: strange")
    magic, details = values.load(raw)
    assert magic == values.ERROR_MAGIC
    error = remote_error(details, "D.m")
    assert type(error) is Odd and str(error) == "strange"
    assert "in there" in str(error.__cause__)

    class Locked(Exception):
        def __init__(self) -> None:
            super().__init__("locked")
            self.lock = threading.Lock()

    _, details = values.load(values.error_frame(Locked(), "tb"))
    fallback = remote_error(details, "D.m")
    assert isinstance(fallback, HandleError) and str(fallback) == "D.m: Locked: locked"


def resolved(value: object) -> DeploymentResponse:
    future: asyncio.Future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return DeploymentResponse(future)


async def test_responses_among_the_arguments_are_sent_as_their_results() -> None:
    parts = await call_frame((resolved(1), [resolved(2)]), {"k": {"n": resolved(3)}})
    assert values.load(joined(parts))[1] == ((1, [2]), {"k": {"n": 3}})

    failing: asyncio.Future = asyncio.get_running_loop().create_future()
    failing.set_exception(Odd("upstream failed"))
    with pytest.raises(Odd, match="upstream failed"):
        await call_frame((DeploymentResponse(failing),), {})


async def test_what_cannot_be_an_argument_is_named() -> None:
    from servefleet import deployment
    from servefleet._private.handles.responses import DeploymentResponseGenerator

    with pytest.raises(TypeError, match="DeploymentResponseGenerator"):
        await call_frame((DeploymentResponseGenerator(None, None),), {})
    with pytest.raises(TypeError, match="bound deployment"):
        await call_frame((deployment(lambda: 1).bind(),), {})
    with pytest.raises(TypeError, match="lock"):
        await call_frame((threading.Lock(),), {})


def test_handles_pickle_as_handles_and_take_the_replicas_controllers() -> None:
    made = DeploymentHandle("D", "app", ["10.0.0.1:7373"]).options(method_name="m",
                                                                   stream=True)
    copy = pickle.loads(pickle.dumps(made))
    assert (copy.deployment, copy.application, copy.controllers, copy.method, copy.stream) == (
        "D", "app", ["10.0.0.1:7373"], "m", True)
    before = replica_context.current()
    replica_context.set_current(replica_context.ReplicaIdentity(
        "c", "app", "D", "r1", controllers=("127.0.0.1:9999",)))
    try:
        assert pickle.loads(pickle.dumps(made)).controllers == ["127.0.0.1:9999"]
        assert DeploymentHandle("D", "app").controllers == ["127.0.0.1:9999"]
        assert DeploymentHandle("D", "app", "1.2.3.4:1").controllers == ["1.2.3.4:1"]
    finally:
        replica_context._current = before


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Box:
    size: decimal.Decimal
    when: datetime.date


class Reading(pydantic.BaseModel):
    value: float
    at: datetime.datetime


def test_results_encode_by_jsonable_encoder_rules() -> None:
    ident = uuid.UUID(int=1)
    assert jsonable({"c": Color.RED, "u": ident, "t": (1, 2), "s": frozenset([1])}) == {
        "c": "red", "u": str(ident), "t": [1, 2], "s": [1]}
    assert jsonable(Box(decimal.Decimal("2"), datetime.date(2024, 1, 2))) == {
        "size": 2, "when": "2024-01-02"}
    assert jsonable(decimal.Decimal("0.5")) == 0.5
    assert jsonable(Reading(value=1, at=datetime.datetime(2024, 1, 2, 3, 4))) == {
        "value": 1.0, "at": "2024-01-02T03:04:00"}
    assert jsonable(np.arange(4).reshape(2, 2)) == [[0, 1], [2, 3]]
    assert jsonable([np.float32(0.5), np.bool_(True)]) == [0.5, True]
    assert jsonable(datetime.timedelta(minutes=1)) == 60.0

    class Opaque:
        __slots__ = ()

    with pytest.raises(TypeError, match="Opaque cannot be encoded as JSON"):
        jsonable(Opaque())


def test_the_fast_path_leaves_what_json_cannot_take_to_the_encoder() -> None:
    result = {"n": np.int64(3)}
    assert plain_answer(result) is None
    assert to_response(result).body == b'{"n":3}'
    assert plain_answer({"n": 3}) == (b'{"n":3}', b"application/json")


def test_handlers_without_a_request_parameter_are_known() -> None:
    class WithRequest:
        def __call__(self, request):
            return 1

    class Without:
        def __call__(self):
            return 1

    def star(*args):
        return args

    def keyword_only(*, x=1):
        return x

    assert takes_request(WithRequest()) and takes_request(star)
    assert not takes_request(Without()) and not takes_request(keyword_only)
    assert not takes_request(lambda: 0)
