"""OpenAI's request bodies, read and checked: what the ingress hands the engine.

`completion_request(body)` and `chat_request(body)` turn a parsed JSON body
of POST /v1/completions and /v1/chat/completions into a `GenerationRequest`,
or raise `APIError` naming the parameter at fault (OpenAI's error object:
400, type invalid_request_error, `param`). Parameters OpenAI documents and
the engine cannot honour (logprobs, tools, response_format...) are refused
by name rather than ignored when they would change the answer; fields that
change nothing here (`user`, `metadata`, `store`) are accepted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from servefleet._private.llm.engine import ChatMessage, SamplingParams

MAX_STOPS = 4
MAX_N = 16
DEFAULT_MAX_TOKENS = 16
# Parameters that would change the answer and that no engine here provides.
UNSUPPORTED = ("logprobs", "top_logprobs", "tools", "tool_choice", "functions",
               "function_call", "response_format", "logit_bias", "suffix", "echo",
               "best_of", "audio", "modalities", "prediction")


class APIError(Exception):
    """An answer in OpenAI's error shape: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = \
            status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param)


@dataclass(frozen=True)
class GenerationRequest:
    """One request as the ingress serves it: the model, a prompt or chat
    messages (rendered by the model's template at its replica), sampling,
    how many choices, and how to answer."""

    model: str
    params: SamplingParams
    prompt: str = ""
    messages: tuple[ChatMessage, ...] = ()
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    chat: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def with_seed(self, index: int) -> SamplingParams:
        """Choice `index`'s parameters: seeds seed, seed+1, ... (None stays None)."""
        p = self.params
        if p.seed is None or index == 0:
            return p
        return dataclasses.replace(p, seed=p.seed + index)


def completion_request(body: Any) -> GenerationRequest:
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad("prompt", "prompt must be a string (a list of prompts or of token ids "
                            "is not supported)")
    return GenerationRequest(prompt=prompt, chat=False, **_common(body, "max_tokens"))


def chat_request(body: Any) -> GenerationRequest:
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "messages must be a non-empty array of {role, content}")
    read = tuple(_message(m, i) for i, m in enumerate(messages))
    return GenerationRequest(messages=read, chat=True,
                             **_common(body, "max_completion_tokens", "max_tokens"))


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    for name in UNSUPPORTED:
        if body.get(name) not in (None, False, 0):
            raise bad(name, f"{name} is not supported by this server")
    return body


def _message(message: Any, index: int) -> ChatMessage:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise bad(where, f"{where} must be an object with role and content")
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str) or not role:
        raise bad(f"{where}.role", f"{where}.role must be a non-empty string")
    if isinstance(content, list):  # content parts: text ones only
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        if len(texts) != len(content) or not all(isinstance(t, str) for t in texts) or any(
                p.get("type") != "text" for p in content):
            raise bad(f"{where}.content", f"{where}.content: only text parts are supported")
        content = "".join(texts)  # type: ignore[arg-type]
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise bad(f"{where}.content", f"{where}.content must be a string or text parts")
    return ChatMessage(role=role, content=content)


def _common(body: dict[str, Any], *token_names: str) -> dict[str, Any]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "model must be the id of a served model (GET /v1/models)")
    max_tokens = DEFAULT_MAX_TOKENS
    for name in token_names:
        if body.get(name) is not None:
            max_tokens = _integer(body, name, 1, None)
            break
    stream = _boolean(body, "stream", False)
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise bad("stream_options", "stream_options must be an object")
        if not stream:
            raise bad("stream_options", "stream_options is only allowed with stream: true")
        include_usage = _boolean(options, "include_usage", False)
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
        seed=_integer(body, "seed", None, None) if body.get("seed") is not None else None,
        stop=_stops(body.get("stop")), ignore_eos=_boolean(body, "ignore_eos", False))
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise bad("user", "user must be a string")
    n = _integer(body, "n", 1, MAX_N) if body.get("n") is not None else 1
    return {"model": model, "params": params, "n": n, "stream": stream,
            "include_usage": include_usage}


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad("stop", "stop must be a non-empty string or an array of them")
    if len(stops) > MAX_STOPS:
        raise bad("stop", f"stop takes at most {MAX_STOPS} sequences")
    return tuple(stops)


def _boolean(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(name, f"{name} must be true or false")
    return value


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float,
            open_low: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(name, f"{name} must be a number")
    if value > high or value < low or (open_low and value == low):
        span = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise bad(name, f"{name} must be in {span}, got {value}")
    return float(value)


def _integer(body: dict[str, Any], name: str, low: int | None, high: int | None) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"{name} must be an integer")
    if (low is not None and value < low) or (high is not None and value > high):
        raise bad(name, f"{name} must be {'at least ' + str(low) if low is not None else ''}"
                        f"{' and ' if low is not None and high is not None else ''}"
                        f"{'at most ' + str(high) if high is not None else ''}, got {value}")
    return value
