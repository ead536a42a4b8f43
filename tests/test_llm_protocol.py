"""OpenAI request bodies read and checked (servefleet/_private/llm/openai_protocol.py)
and the answers built (openai_responses.py): pure logic, no servers."""

from __future__ import annotations

import json

import pytest

from servefleet._private.llm.openai_protocol import APIError, chat_request, completion_request
from servefleet._private.llm.openai_responses import Choice, Reply
from servefleet.llm import ChatMessage

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_chat_body_becomes_a_request_with_openais_defaults() -> None:
    got = chat_request({**CHAT, "max_completion_tokens": 7, "stop": "x", "seed": 3, "n": 2,
                        "stream": True, "stream_options": {"include_usage": True},
                        "user": "u-1", "metadata": {"any": "thing"}})
    assert got.messages == (ChatMessage("user", "hi"),) and got.chat and got.n == 2
    assert got.params.max_tokens == 7 and got.params.stop == ("x",)
    assert got.stream and got.include_usage
    assert [got.with_seed(i).seed for i in range(3)] == [3, 4, 5]
    plain = completion_request({"model": "m", "prompt": ["one prompt"]})
    assert plain.prompt == "one prompt" and plain.params.max_tokens == 16
    assert plain.params.temperature == 1.0 and plain.params.top_p == 1.0
    parts = chat_request({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                   "text": "b"}]}]})
    assert parts.messages[0].content == "ab"


@pytest.mark.parametrize(("body", "param"), [
    ({**CHAT, "temperature": 2.5}, "temperature"),
    ({**CHAT, "temperature": "hot"}, "temperature"),
    ({**CHAT, "top_p": 0}, "top_p"),
    ({**CHAT, "max_tokens": 0}, "max_tokens"),
    ({**CHAT, "max_completion_tokens": 1.5}, "max_completion_tokens"),
    ({**CHAT, "n": 0}, "n"),
    ({**CHAT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({**CHAT, "stop": [""]}, "stop"),
    ({**CHAT, "seed": "7"}, "seed"),
    ({**CHAT, "stream_options": {"include_usage": True}}, "stream_options"),
    ({**CHAT, "logprobs": True}, "logprobs"),
    ({**CHAT, "tools": [{"type": "function"}]}, "tools"),
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": CHAT["messages"]}, "model"),
])
def test_a_bad_parameter_is_a_400_naming_it(body, param) -> None:
    with pytest.raises(APIError) as refused:
        chat_request(body)
    assert refused.value.status == 400 and refused.value.param == param
    assert refused.value.body()["error"]["type"] == "invalid_request_error"
    with pytest.raises(APIError, match="prompt"):
        completion_request({"model": "m", "prompt": [1, 2, 3]})
    with pytest.raises(APIError, match="JSON object"):
        chat_request(["not", "an", "object"])


def test_answers_and_chunks_have_openais_shape() -> None:
    chat = Reply("m", chat=True, include_usage=True)
    whole = chat.complete([Choice("Hello", 2, "stop")], prompt_tokens=4)
    assert whole["object"] == "chat.completion" and whole["id"].startswith("chatcmpl-")
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}
    assert whole["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    role, piece, last, usage = (json.loads(c.removeprefix(b"data: ")) for c in (
        chat.role_chunk(0), chat.piece_chunk(0, "Hel", None), chat.piece_chunk(0, "", "stop"),
        chat.usage_chunk(4, 2)))
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert piece["object"] == "chat.completion.chunk" and piece["usage"] is None
    assert piece["choices"][0]["delta"] == {"content": "Hel"}
    assert last["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                  "finish_reason": "stop"}
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 6
    text = Reply("m", chat=False)
    chunk = json.loads(text.piece_chunk(1, " word", "length").removeprefix(b"data: "))
    assert chunk["object"] == "text_completion" and "usage" not in chunk
    assert chunk["choices"][0] == {"index": 1, "text": " word", "logprobs": None,
                                   "finish_reason": "length"}


def test_failed_calls_map_to_openais_statuses() -> None:
    from servefleet._private.handle_errors import HandleError
    from servefleet._private.llm.openai_ingress import api_error
    from servefleet.serve.exceptions import BackPressureError

    full = api_error(BackPressureError(num_queued_requests=8, max_queued_requests=8))
    assert (full.status, full.kind, full.code) == (429, "rate_limit_error", "overloaded")
    gone = api_error(HandleError("no replica of LLMServer_m took the call", 503))
    assert (gone.status, gone.kind) == (503, "server_error")
    assert api_error(ValueError("top_p must be in (0, 1]")).status == 400
    broken = api_error(RuntimeError("secret detail"))
    assert broken.status == 500 and "secret" not in broken.message


def test_the_examples_build_the_model_kjv_trigram() -> None:
    """examples/llm: the app module and the config file name an application
    with the ingress over the model "kjv-trigram" (no server started)."""
    import runpy
    from pathlib import Path

    from servefleet._private.configuration.config_file import load_config
    from servefleet.llm import build_openai_app

    examples = Path(__file__).resolve().parent.parent / "examples" / "llm"
    app = runpy.run_path(str(examples / "app.py"))["app"]
    assert app.deployment.name == "OpenAIIngress"
    assert {m: s.deployment.name for m, s in app.args[0].items()} == {
        "kjv-trigram": "LLMServer_kjv_trigram", "kjv-gospels": "LLMServer_kjv_gospels"}
    [spec] = load_config(str(examples / "config.yaml")).applications
    assert (spec.route_prefix, spec.import_path) == ("/llm", "servefleet.llm:build_openai_app")
    built = build_openai_app(json.loads(spec.args_json))
    assert list(built.args[0]) == ["kjv-trigram"]
