"""What tests/test_fuzz_replica.py sends a replica's ports: HTTP/1.1
requests (hop and handle-call headers, framings, bodies that are no frame,
cut frames, planted pickles), WebSocket upgrades, gRPC calls and raw HTTP/2
frames, as hypothesis strategies; and how an HTTP answer is read."""

from __future__ import annotations

import errno
import struct
from typing import Any

from hypothesis import strategies as st
from test_fuzz import exchange

from servefleet._private.handles import values

GRPC_PATHS = ["/classifier.v1.Classifier/Predict", "/classifier.v1.Classifier/PredictStream",
              "/streams.v1.Streams/Upload", "/streams.v1.Streams/Echo",
              "/streams.v1.Streams/UploadSync", "/streams.v1.Streams/EchoSync",
              "/classifier.v1.Classifier/Nope", "/x.Y/Z", "/", "//"]
CONTROL_PATHS = [f"/servefleet.v1.ReplicaService/{m}" for m in
                 ("GetMetadata", "CheckHealth", "Reconfigure", "Drain", "Nope")]


class Planted:
    """Unpickling this creates a file: proof that a body was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def frame(value: Any) -> bytes:
    return b"".join(bytes(p) for p in values.frame(value))


@st.composite
def bodies(draw, planted: str) -> bytes:
    kind = draw(st.sampled_from(["none", "garbage", "call", "cut", "odd", "planted"]))
    if kind == "none":
        return b""
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=256))
    if kind == "odd":  # frames of values that are no (args, kwargs)
        return frame(draw(st.sampled_from([5, (1,), ((1,), {1: 2}), ("ab", {}), ((), []),
                                           ((), {"a": 1}, 3), None, ({}, ())])))
    whole = frame(((Planted(planted),), {}) if kind == "planted" else
                  ((draw(st.integers()), "x"), {"k": draw(st.text(max_size=8))}))
    if kind == "cut":
        return whole[:draw(st.integers(0, len(whole) - 1))]
    return whole


def chunked(body: bytes, broken: bool) -> bytes:
    if broken:
        return b"%x\r\n%s" % (len(body) + 3, body)
    return (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"


@st.composite
def http_requests(draw, hops: list[str], planted: str, method_needed: bool = False) -> bytes:
    """A request, much of it drawn: the method, the target, the hop and
    handle-call headers (huge, duplicated, malformed), Content-Length and
    Transfer-Encoding mixes, a body; then a few bytes flipped, cut or added."""
    verb = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"DELETE",
                                 b"PRI", b"G\x00T", b"CONNECT"]))
    target = draw(st.sampled_from([b"/", b"/rec/x", b"/ws", b"//", b"/%00", b"*", b"/a?b=c",
                                   b"http://h/x", b"/" + b"a" * 3000]))
    head = [b"host: a"]
    for _ in range(draw(st.integers(1 if hops else 0, 3))):
        value = draw(st.sampled_from(hops)).encode() if hops and draw(st.booleans()) else \
            draw(st.sampled_from([b"", b"sfh1.", b"sfh1.a.b", b"\xff\xfe", b"x" * 70000,
                                  b"sfh1." + b"A" * 5000 + b".b"]))
        head.append(b"x-servefleet-hop: " + value)
    if method_needed or draw(st.booleans()):
        # Of the app's methods only `record`, which takes any arguments: one
        # called with arguments it does not take raises in user code, a
        # failure of the caller's program, logged at ERROR as Ray logs it.
        for _ in range(draw(st.integers(1, 2))):
            head.append(b"x-servefleet-method: " + draw(st.sampled_from(
                [b"record", b"__call__", b"_private", b"nope", b"", b"rec\xffrd",
                 b"record\x00", b"m" * 9000, b"__init__", b"record.__class__"])))
        if draw(st.booleans()):
            head.append(b"x-servefleet-stream: 1")
    for _ in range(draw(st.integers(0, 2))):
        head.append(draw(st.sampled_from([b"x-request-id: " + b"r" * 300, b"traceparent: 00-x",
                                          b"x-servefleet-route-prefix: /rec",
                                          b"x-servefleet-check: 1", b"expect: 100-continue",
                                          b"x-servefleet-model-id: \xff"])))
    body = draw(bodies(planted))
    framing = draw(st.sampled_from(["length", "wrong", "chunked", "both", "broken", "none",
                                    "twice"]))
    if framing in ("length", "both"):
        head.append(b"content-length: %d" % len(body))
    if framing == "wrong":
        head.append(b"content-length: " + draw(st.sampled_from(
            [b"%d" % (len(body) + 7), b"-1", b"x", b"99999999999999999999", b""])))
    if framing == "twice":
        head += [b"content-length: %d" % len(body), b"content-length: %d" % (len(body) + 1)]
    if framing in ("chunked", "both", "broken"):
        head.append(b"transfer-encoding: " + draw(st.sampled_from(
            [b"chunked", b"gzip, chunked", b"chunked, identity", b"xchunked"])))
        body = chunked(body, framing == "broken")
    raw = bytearray(verb + b" " + target + b" HTTP/1.1\r\n" + b"\r\n".join(head) +
                    b"\r\n\r\n" + body)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(raw) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            raw[i] = draw(st.integers(0, 255))
        elif action == "cut":
            del raw[i:i + draw(st.integers(1, 8))]
        else:
            raw[i:i] = draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


@st.composite
def upgrades(draw, hops: list[str]) -> bytes:
    """A WebSocket upgrade (valid, or with a bad key, version or headers),
    then frames: valid-looking ones and random bytes."""
    key = draw(st.sampled_from([b"dGhlIHNhbXBsZSBub25jZQ==", b"", b"\xff\xff", b"short"]))
    head = [b"host: a", b"upgrade: " + draw(st.sampled_from([b"websocket", b"WebSocket", b"x"])),
            b"connection: " + draw(st.sampled_from([b"upgrade", b"Upgrade, keep-alive", b"close"])),
            b"sec-websocket-key: " + key,
            b"sec-websocket-version: " + draw(st.sampled_from([b"13", b"8", b"x"]))]
    if hops:
        head.append(b"x-servefleet-hop: " + draw(st.sampled_from(hops)).encode())
    if draw(st.booleans()):
        head.append(b"x-servefleet-method: record")
    if draw(st.booleans()):
        head.append(b"sec-websocket-protocol: " + draw(st.binary(max_size=20)).replace(b"\r", b"")
                    .replace(b"\n", b""))
    text = draw(st.binary(max_size=40))
    masked = bytes([0x81, 0x80 | len(text)]) + b"\x00\x00\x00\x00" + text  # zero mask
    tail = draw(st.sampled_from([masked, b"\x88\x80\x00\x00\x00\x00", b""])) + \
        draw(st.binary(max_size=64))
    target = draw(st.sampled_from([b"/ws", b"/rec/ws", b"/", b"/nope"]))
    return b"GET " + target + b" HTTP/1.1\r\n" + b"\r\n".join(head) + b"\r\n\r\n" + tail

def send(port: int, raw: bytes, half_close: bool = True, timeout: float = 2) -> bytes:
    """test_fuzz.exchange; b"" when the server closed the connection (after
    a refusal) before all of `raw` was sent."""
    try:
        return exchange(port, raw, half_close, timeout)
    except OSError as e:
        if e.errno in (errno.ENOTCONN, errno.ECONNRESET, errno.EPIPE):
            return b""
        raise


def status_of(answer: bytes) -> int | None:
    """The status of an answer after any `100 Continue` (None: closed
    without a word), which must be a well-formed HTTP/1.1 status line with
    no traceback anywhere."""
    assert b"Traceback" not in answer, answer[:2000]
    if answer.startswith(b"HTTP/1.1 100 "):
        answer = answer.partition(b"\r\n\r\n")[2]
    if not answer:
        return None
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer[9:12])


REFUSED_HTTP = {400, 401, 403, 404, 405, 408, 411, 413, 414, 426, 431, 501, 505}


def head_lines(raw: bytes) -> list[bytes]:
    return raw.split(b"\r\n\r\n", 1)[0].lower().split(b"\r\n")[1:]


def grpc_message(draw) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=64))
    valid = b"\x0a\x05hello" if draw(st.booleans()) else b"\x08\x01\x12\x03abc\x1a\x02xy"
    raw = bytearray(valid)
    for _ in range(draw(st.integers(0, 3))):
        raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw)


@st.composite
def grpc_calls(draw, paths: list[str], hops: list[str]):
    path = draw(st.sampled_from(paths))
    metadata = [("x-servefleet-hop", draw(st.sampled_from(hops)))
                for _ in range(draw(st.integers(0 if "" in hops else 1, 2)))]
    metadata = [(k, v) for k, v in metadata if v]
    for _ in range(draw(st.integers(0, 2))):
        metadata.append((draw(st.sampled_from(["x-request-id", "traceparent", "x-servefleet-caller",
                                               "authorization", "grpc-x"])),
                         draw(st.text(alphabet=st.characters(min_codepoint=32,
                                                             max_codepoint=126), max_size=30))))
    messages = [grpc_message(draw) for _ in range(draw(st.integers(1, 3)))]
    return path, tuple(metadata), messages


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@st.composite
def h2_frames(draw) -> bytes:
    """The client preface (or not), then frames with drawn types, flags,
    stream ids and payloads, some of them HEADERS of a gRPC path in HPACK's
    literal form."""
    out = PREFACE if draw(st.integers(0, 5)) else draw(st.binary(max_size=24))
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 10))
        if kind == 1 and draw(st.booleans()):  # HEADERS, literals without indexing
            path = draw(st.sampled_from(GRPC_PATHS + CONTROL_PATHS)).encode()
            payload = b"\x83\x86" + b"\x04" + bytes([len(path)]) + path + \
                draw(st.binary(max_size=32))
        else:
            payload = draw(st.binary(max_size=64))
        stream = draw(st.sampled_from([0, 1, 3, 2, 0x7fffffff]))
        out += struct.pack(">I", len(payload))[1:] + bytes([kind, draw(st.integers(0, 255))]) + \
            struct.pack(">I", stream) + payload
    return out
