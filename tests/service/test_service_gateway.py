"""The OpenAI-compatible gateway as a real process, driven by the official `openai` client, in front of
a stand-in model that returns scripted tool calls (valid, fixable, hallucinated, streamed)."""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from _service_support import HISTORY, TOOLS, ServiceProcess  # noqa: E402

from reflection.testing.upstream import StandInModel  # noqa: E402

pytestmark = pytest.mark.slow  # processes, servers or a browser: `pytest -m "not slow"` leaves them out

VALID = {
    "content": "Let me look that up.",
    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}],
}
FIXABLE = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}]}
HALLUCINATED = {"tool_calls": [{"name": "get_forecast_for_city", "arguments": {"city": "Paris"}}]}
SCRIPT = {
    "valid": [VALID],
    "fixable": [FIXABLE],
    "hallucinated": [
        HALLUCINATED,
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]},
    ],
    "stubborn": [HALLUCINATED],
    "gives-up": [HALLUCINATED, {"content": "Which city do you mean?"}],
    "parallel": [
        {"tool_calls": [VALID["tool_calls"][0], HALLUCINATED["tool_calls"][0]]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
    ],
    "rate-limited": [
        {"status": 429, "error": {"message": "slow down", "type": "rate_limit"}, "headers": {"retry-after": "7"}}
    ],
    "bad-request": [{"status": 400, "error": {"message": "messages is required", "type": "invalid_request_error"}}],
    "sets-cookie": [{"status": 400, "error": {"message": "no"}, "headers": {"set-cookie": "session=client-a; Path=/"}}],
    "long": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris" + " " * 1_800_000, "days": 2}}]}],
}
MAX_ROUNDS = 2


@pytest.fixture(scope="module")
def upstream():
    with StandInModel(SCRIPT, idle_timeout=120) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstream):
    config = {"upstream": {"base_url": upstream.base_url, "max_reflect_rounds": MAX_ROUNDS}}
    server = ServiceProcess(tmp_path_factory.mktemp("gateway"), config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(gateway):
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-client-key", max_retries=0) as c:
        yield c


def _create(client, model, **extra):
    raw = client.chat.completions.with_raw_response.create(model=model, messages=HISTORY, tools=TOOLS, **extra)
    return raw.parse(), raw.headers


def _arguments(call) -> dict:
    return json.loads(call.function.arguments)


def test_a_valid_call_passes_through(client):
    completion, headers = _create(client, "valid")
    message = completion.choices[0].message
    assert [(c.function.name, _arguments(c)) for c in message.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 2})
    ]
    assert message.content == "Let me look that up."
    assert headers["x-reflection-actions"] == "allow" and headers["x-reflection-rounds"] == "0"
    assert completion.reflection["decisions"][0]["action"] == "allow"


def test_a_fixable_call_is_replaced_by_its_correction(client):
    completion, headers = _create(client, "fixable")
    call = completion.choices[0].message.tool_calls[0]
    assert _arguments(call) == {"city": "Paris", "days": 2}
    assert call.id == "call_" + completion.id.rsplit("-", 1)[1] + "_0"
    assert headers["x-reflection-actions"] == "modify"
    assert completion.choices[0].finish_reason == "tool_calls"


def test_a_hallucinated_call_is_sent_back_with_feedback_and_the_new_call_used(client, upstream):
    completion, headers = _create(client, "hallucinated")
    message = completion.choices[0].message
    assert [(c.function.name, _arguments(c)) for c in message.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 2})
    ]
    assert headers["x-reflection-actions"] == "allow" and headers["x-reflection-rounds"] == "1"
    assert [d["action"] for d in completion.reflection["decisions"]] == ["reflect", "allow"]
    reask = upstream.requests[-1]
    assert reask["messages"][:-2] == HISTORY
    assert reask["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_forecast_for_city"
    assert reask["messages"][-1]["role"] == "tool"
    assert "get_forecast_for_city" in reask["messages"][-1]["content"]
    assert "non_existent_function" in reask["messages"][-1]["content"]


def test_a_call_still_refused_after_the_rounds_is_denied_with_text_saying_why(client, upstream):
    before = len(upstream.requests)
    completion, headers = _create(client, "stubborn")
    choice = completion.choices[0]
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert choice.message.content.startswith('The call to "get_forecast_for_city" was blocked by reflection')
    assert headers["x-reflection-actions"] == "deny" and headers["x-reflection-rounds"] == str(MAX_ROUNDS)
    assert len(upstream.requests) - before == 1 + MAX_ROUNDS


def test_a_model_that_answers_in_words_after_feedback_is_answered_with_them(client):
    completion, headers = _create(client, "gives-up")
    assert completion.choices[0].message.content == "Which city do you mean?"
    assert completion.choices[0].message.tool_calls is None
    assert headers["x-reflection-actions"] == "reflect"


def test_parallel_calls_are_gated_each_and_only_the_refused_one_is_asked_again(client):
    completion, headers = _create(client, "parallel")
    calls = completion.choices[0].message.tool_calls
    assert [(c.function.name, _arguments(c)) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 2}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert headers["x-reflection-actions"] == "allow,allow"


def test_requests_without_tools_pass_through_untouched(gateway, upstream):
    body = b'{"model": "plain",   "messages": [{"role": "user", "content": "hi"}], "temperature": 0.5}'
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", "authorization": "Bearer sk-client-key"},
    )
    assert response.status_code == 200
    assert upstream.raw_requests[-1] == body
    assert "reflection" not in response.json() and "x-reflection-actions" not in response.headers
    assert response.json()["choices"][0]["message"]["content"] == "ok"


def test_the_clients_authorization_reaches_the_upstream(client, upstream):
    _create(client, "valid")
    assert upstream.headers[-1]["authorization"] == "Bearer sk-client-key"


def test_a_cookie_the_upstream_sets_is_not_sent_on_later_requests(tmp_path, upstream):
    # By host name: HTTP clients keep no cookies for bare IP addresses anyway.
    base_url = upstream.base_url.replace("127.0.0.1", "localhost")
    server = ServiceProcess(tmp_path, {"upstream": {"base_url": base_url}}).start()
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="sk-client-key", max_retries=0) as c:
            with pytest.raises(openai.BadRequestError):
                c.chat.completions.create(model="sets-cookie", messages=HISTORY, tools=TOOLS)
            _create(c, "valid")
    finally:
        server.stop()
    assert "cookie" not in upstream.headers[-1]


def test_upstream_errors_reach_the_client_unchanged(client):
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="rate-limited", messages=HISTORY, tools=TOOLS)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body == {"message": "slow down", "type": "rate_limit"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="bad-request", messages=HISTORY, tools=TOOLS, stream=True)
    assert caught.value.body["message"] == "messages is required"


def _stream(client, model):
    events = []
    for chunk in client.chat.completions.create(
        model=model, messages=HISTORY, tools=TOOLS, stream=True, stream_options={"include_usage": True}
    ):
        if not chunk.choices:
            events.append(("usage", chunk.usage.total_tokens))
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            events.append(("text", choice.delta.content))
        for part in choice.delta.tool_calls or []:
            events.append(("call", part.index, part.function.name, json.loads(part.function.arguments)))
        if choice.finish_reason:
            events.append(("finish", choice.finish_reason, chunk.reflection["actions"]))
    return events


def test_streamed_text_passes_and_a_valid_call_arrives_whole_after_it(client):
    assert _stream(client, "valid") == [
        ("text", "Let"),
        ("text", " me"),
        ("text", " look"),
        ("text", " that"),
        ("text", " up."),
        ("call", 0, "get_weather", {"city": "Paris", "days": 2}),
        ("finish", "tool_calls", ["allow"]),
        ("usage", 30),
    ]


def test_a_streamed_fixable_call_arrives_corrected(client):
    assert _stream(client, "fixable")[:2] == [
        ("call", 0, "get_weather", {"city": "Paris", "days": 2}),
        ("finish", "tool_calls", ["modify"]),
    ]


def test_a_streamed_hallucinated_call_is_replaced_by_the_reasked_one(client):
    assert _stream(client, "hallucinated")[:2] == [
        ("call", 0, "get_weather", {"city": "Paris", "days": 2}),
        ("finish", "tool_calls", ["allow"]),
    ]


def test_a_streamed_call_that_stays_refused_becomes_text(client):
    events = _stream(client, "stubborn")
    assert events[0][0] == "text" and events[0][1] == (
        'The call to "get_forecast_for_city" was blocked by reflection (static checks failed: non_existent_function).'
    )
    assert events[1] == ("finish", "stop", ["deny"])


def test_a_streamed_call_whose_event_lines_outgrow_the_readers_buffer_arrives_whole(client):
    # Each of the call's three argument chunks is a ~600 kB event line (aiohttp's line reader stops at 512 kB).
    events = _stream(client, "long")
    assert events[0] == ("call", 0, "get_weather", {"city": "Paris" + " " * 1_800_000, "days": 2})
    assert events[1][0] == "finish"


@pytest.fixture(scope="module")
def escalating(tmp_path_factory, upstream):
    config = {"upstream": {"base_url": upstream.base_url}, "gate": {"on_invalid": "escalate"}}
    server = ServiceProcess(tmp_path_factory.mktemp("escalating"), config).start()
    yield server
    server.stop()


def test_an_escalated_call_is_held_for_approval(escalating):
    with openai.OpenAI(base_url=escalating.url + "/v1", api_key="sk", max_retries=0) as c:
        completion, headers = _create(c, "stubborn")
    assert completion.choices[0].message.tool_calls is None
    assert headers["x-reflection-actions"] == "escalate" and headers["x-reflection-rounds"] == "0"
    held = completion.reflection["escalated"]
    assert held[0]["call"]["function"]["name"] == "get_forecast_for_city"
    assert "get_forecast_for_city" in held[0]["feedback"]
