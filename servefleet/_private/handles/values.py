"""Python values on the handle hop: pickle protocol 5, large buffers out of band.

Handle calls carry any Python value, as Ray Serve's do: arguments, results
and streamed items are pickled (cloudpickle's pickler, so a class or
function a driver script defined in `__main__` travels by value). A buffer
that pickle hands out of band (a numpy array's data, a `PickleBuffer`) of at
least OUT_OF_BAND_MIN bytes is not copied into the pickle: the frame is

    magic (4 bytes) | count n (u32) | n lengths (u64) | segment 0 | segment 1 | ...

where segment 0 is the pickle and the others are the raw buffers, each
padded to an 8-byte boundary so arrays built over them are aligned. The
sender writes the segments one after the other (`frame` returns them as a
list, never joined when there are buffers); the receiver unpickles over
slices of the one received body (`load`), so a numpy array is built over
those bytes without another copy (and is writable when the body is a
bytearray). Plain `bytes` values travel inside the pickle.

A second magic marks an error frame: what the target raised, as
(type name, message, remote traceback text, pickled exception or None), so
that a caller that cannot unpickle the exception (its class is not
importable there) still gets its name, message and traceback.

Streams are frames one after another, each preceded by its length (u64).

Security: unpickling runs code chosen by whoever wrote the pickle. A
replica unpickles the body of every request that carries the
`x-servefleet-method` header, as Ray's workers unpickle what reaches them.
Proxies drop that header (and every `x-servefleet-*` header) from their
clients' requests, so HTTP through a proxy never reaches this code; but a
replica's own HTTP port must be reachable only by the cluster's own
processes (proxies, other replicas, trusted drivers), never by untrusted
clients. Handles likewise unpickle what replicas answer.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Callable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

# Frame kinds (the first 4 bytes).
VALUE_MAGIC = b"SFv5"
ERROR_MAGIC = b"SFe5"
# The content type of a handle call's body and of its answer (value or error
# frame), and of a streaming answer (length-prefixed frames).
CONTENT_TYPE = b"application/x-servefleet-pickle"
STREAM_CONTENT_TYPE = b"application/x-servefleet-pickle-stream"
# Smaller buffers are copied into the pickle: framing them costs more than the copy.
OUT_OF_BAND_MIN = 16 * 1024
_ALIGN = 8
_HEAD = struct.Struct("<4sI")
_LENGTH = struct.Struct("<Q")
_PAD = bytes(_ALIGN)

Buffer = bytes | bytearray | memoryview
# A pickler hook (pickle.Pickler.reducer_override): a reduce tuple, or
# NotImplemented to pickle the object as usual.
Override = Callable[[Any], Any]


class FrameError(ValueError):
    """A body that is not a well-formed frame."""


class _Pickler(cloudpickle.Pickler):
    def __init__(self, file: io.BytesIO, override: Override | None,
                 buffer_callback: Callable[[pickle.PickleBuffer], bool]) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._override = override

    def reducer_override(self, obj: Any) -> Any:
        if self._override is not None:
            reduced = self._override(obj)
            if reduced is not NotImplemented:
                return reduced
        return super().reducer_override(obj)


def frame(value: Any, override: Override | None = None,
          magic: bytes = VALUE_MAGIC) -> list[Buffer]:
    """`value` as a frame's segments, to be written in order (one `bytes`
    when nothing went out of band). Raises what pickling raises (TypeError,
    pickle.PicklingError) for a value that cannot be pickled."""
    buffers: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: pickle copies it in band
            return True
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True
        buffers.append(raw)
        return False

    out = io.BytesIO()
    _Pickler(out, override, out_of_band).dump(value)
    data = out.getbuffer()
    lengths = [data.nbytes, *(b.nbytes for b in buffers)]
    head = _HEAD.pack(magic, len(lengths)) + b"".join(_LENGTH.pack(n) for n in lengths)
    head += _PAD[:_padding(len(head))]
    if not buffers:
        return [head + data]
    parts: list[Buffer] = [head]
    for segment in (data, *buffers):
        parts.append(segment)
        if pad := _padding(segment.nbytes):
            parts.append(_PAD[:pad])
    return parts


def frame_length(parts: list[Buffer]) -> int:
    return sum(memoryview(p).nbytes for p in parts)


def error_frame(error: BaseException, traceback_text: str) -> bytes:
    """What the target raised, as an error frame; the exception itself is
    left out (None) when it cannot be pickled."""
    try:
        pickled: bytes | None = cloudpickle.dumps(error, protocol=5)
    except Exception:
        pickled = None
    details = (type(error).__name__, str(error), traceback_text, pickled)
    return b"".join(bytes(p) for p in frame(details, magic=ERROR_MAGIC))


def load(body: Buffer) -> tuple[bytes, Any]:
    """(magic, value) of one frame: the value, or for an error frame its
    (type name, message, traceback, pickled exception or None). Arrays are
    built over `body`'s memory. FrameError for a body that is no frame;
    unpickling errors pass through."""
    view = memoryview(body)
    if view.nbytes < _HEAD.size:
        raise FrameError(f"a frame of {view.nbytes} bytes is shorter than its header")
    magic, count = _HEAD.unpack_from(view)
    if magic not in (VALUE_MAGIC, ERROR_MAGIC):
        raise FrameError(f"not a servefleet value frame (starts with {bytes(view[:4])!r})")
    offset = _HEAD.size + count * _LENGTH.size
    if count < 1 or offset > view.nbytes:
        raise FrameError(f"a frame header announcing {count} segments is cut short")
    lengths = [_LENGTH.unpack_from(view, _HEAD.size + i * _LENGTH.size)[0]
               for i in range(count)]
    offset += _padding(offset)
    segments = []
    for n in lengths:
        if offset + n > view.nbytes:
            raise FrameError(f"a frame of {view.nbytes} bytes is shorter than its "
                             f"segments ({sum(lengths)} bytes)")
        segments.append(view[offset:offset + n])
        offset += n + _padding(n)
    return magic, pickle.loads(segments[0], buffers=segments[1:])


def stream_item(parts: list[Buffer]) -> list[Buffer]:
    """A frame as one item of a stream: its length, then the frame."""
    return [_LENGTH.pack(frame_length(parts)), *parts]


def split_stream(pending: bytearray) -> list[bytes]:
    """Take the complete frames off the front of a stream's bytes (what
    remains is the start of the next one)."""
    frames = []
    start = 0
    while len(pending) - start >= _LENGTH.size:
        (n,) = _LENGTH.unpack_from(pending, start)
        if len(pending) - start - _LENGTH.size < n:
            break
        start += _LENGTH.size
        frames.append(bytes(pending[start:start + n]))
        start += n
    if start:
        del pending[:start]
    return frames


def _padding(n: int) -> int:
    return -n % _ALIGN
