"""The gateway's Anthropic Messages API (`POST /v1/messages`) as a real process, driven by the official
`anthropic` client (streamed and not), in front of a stand-in model that speaks Messages."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("fastapi")
anthropic = pytest.importorskip("anthropic")

from _fixed_upstream import FixedUpstream  # noqa: E402
from _service_support import ServiceProcess  # noqa: E402

from reflection.testing.upstream import StandInModel  # noqa: E402

TOOLS = [
    {
        "name": "get_weather",
        "description": "The forecast for a city.",
        "input_schema": {
            "type": "object",
            "required": ["city"],
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        },
    }
]
QUESTION = [{"role": "user", "content": "What's the weather in Paris for the next 2 days?"}]
GOOD = {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
HALLUCINATED = {"tool_calls": [{"name": "get_forecast_for_city", "arguments": {"city": "Paris"}}]}
SCRIPT = {
    "valid": [{"content": "Let me look that up.", "tool_calls": [GOOD]}],
    "fixable": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}]}],
    "hallucinated": [HALLUCINATED, {"tool_calls": [GOOD]}],
    "stubborn": [HALLUCINATED],
    "chatty": [{"content": "Let me check that for you.", **HALLUCINATED}, {"tool_calls": [GOOD]}],
    "gives-up": [HALLUCINATED, {"content": "Which city do you mean?"}],
    "parallel": [
        {"tool_calls": [GOOD, HALLUCINATED["tool_calls"][0]]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, GOOD]},
    ],
    "overloaded": [
        {"status": 529, "error": {"type": "overloaded_error", "message": "Overloaded"}, "headers": {"retry-after": "7"}}
    ],
    "reask-limited": [HALLUCINATED, {"status": 429, "error": {"type": "rate_limit_error", "message": "slow down"}}],
}
ROUNDS = 2
ANTHROPIC_KEY = "sk-ant-client-0123456789"
SERVICE_KEY = "service-key-0123456789"


@pytest.fixture(scope="module")
def upstream():
    with StandInModel(SCRIPT, idle_timeout=180) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstream):
    config = {
        "upstream": {
            "base_url": upstream.base_url,
            "anthropic_base_url": upstream.base_url,
            "max_reflect_rounds": ROUNDS,
        }
    }
    server = ServiceProcess(tmp_path_factory.mktemp("anthropic"), config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(gateway):
    with anthropic.Anthropic(base_url=gateway.url, api_key=ANTHROPIC_KEY, max_retries=0) as c:
        yield c


def _create(client, model, **extra):
    raw = client.messages.with_raw_response.create(model=model, max_tokens=256, messages=QUESTION, tools=TOOLS, **extra)
    return raw.parse(), raw.headers


def _calls(message) -> list[tuple[str, dict]]:
    return [(block.name, block.input) for block in message.content if block.type == "tool_use"]


def _text(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_a_valid_call_passes_through(client, upstream):
    message, headers = _create(client, "valid")
    assert _calls(message) == [("get_weather", {"city": "Paris", "days": 2})]
    assert _text(message) == "Let me look that up." and message.stop_reason == "tool_use"
    assert headers["x-reflection-actions"] == "allow"
    assert message.reflection["decisions"][0]["call_id"] == message.content[1].id
    assert _key(upstream.headers[-1]) == ANTHROPIC_KEY  # the client's own key passes
    assert "anthropic-version" in upstream.headers[-1]


def _key(headers: dict) -> str | None:
    """The Anthropic key a request carried: `x-api-key`, or a bearer token (the SDK's newer form)."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ") or None


def _post(url: str, model: str, headers: dict) -> httpx.Response:
    return httpx.post(
        url + "/v1/messages",
        timeout=30,
        headers={"anthropic-version": "2023-06-01", **headers},
        json={"model": model, "max_tokens": 10, "messages": QUESTION, "tools": TOOLS},
    )


def test_a_clients_x_api_key_reaches_the_upstream(gateway, upstream):
    assert _post(gateway.url, "valid", {"x-api-key": ANTHROPIC_KEY}).status_code == 200
    assert upstream.headers[-1]["x-api-key"] == ANTHROPIC_KEY


def test_a_fixable_call_is_replaced_by_its_correction(client):
    message, headers = _create(client, "fixable")
    assert _calls(message) == [("get_weather", {"city": "Paris", "days": 2})]
    assert message.content[0].id.startswith("toolu_") and headers["x-reflection-actions"] == "modify"


def test_a_hallucinated_call_is_asked_again_with_tool_results_and_the_new_call_used(client, upstream):
    message, headers = _create(client, "hallucinated", system="You are a weather bot.")
    assert _calls(message) == [("get_weather", {"city": "Paris", "days": 2})]
    assert [d["action"] for d in message.reflection["decisions"]] == ["reflect", "allow"]
    reask = upstream.requests[-1]
    assert reask["system"] == "You are a weather bot." and reask["messages"][0] == QUESTION[0]
    turn, results = reask["messages"][1], reask["messages"][2]
    assert turn["role"] == "assistant" and turn["content"][0]["name"] == "get_forecast_for_city"
    assert results["role"] == "user" and results["content"][0]["tool_use_id"] == turn["content"][0]["id"]
    assert "non_existent_function" in results["content"][0]["content"]


def test_a_call_still_refused_after_the_rounds_is_denied_with_text_saying_why(client, upstream):
    before = len(upstream.requests)
    message, headers = _create(client, "stubborn")
    assert _calls(message) == [] and message.stop_reason == "end_turn"
    assert _text(message).startswith('The call to "get_forecast_for_city" was blocked by reflection')
    assert headers["x-reflection-actions"] == "deny" and len(upstream.requests) - before == 1 + ROUNDS
    assert message.usage.input_tokens == 20 * (1 + ROUNDS)  # every round's usage


def test_a_model_that_answers_in_words_after_feedback_is_answered_with_them(client):
    message, headers = _create(client, "gives-up")
    assert _text(message) == "Which city do you mean?" and _calls(message) == []
    assert headers["x-reflection-actions"] == "reflect"


def test_parallel_calls_reach_the_client_once_each_with_unique_ids(client):
    message, _ = _create(client, "parallel")
    assert _calls(message) == [("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Oslo"})]
    ids = [block.id for block in message.content if block.type == "tool_use"]
    assert len(set(ids)) == 2


def test_upstream_errors_reach_the_client_unchanged(client):
    with pytest.raises(anthropic.APIStatusError) as caught:
        _create(client, "overloaded")
    assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(anthropic.RateLimitError):
        _create(client, "reask-limited")


def test_a_block_the_gateway_cannot_check_is_removed(tmp_path):
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "stop_reason": "tool_use",
        "content": [{"type": "future_tool_use", "id": "x", "name": "delete_file", "input": {"path": "/"}}],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    with FixedUpstream(reply) as up:
        server = ServiceProcess(tmp_path, {"upstream": {"base_url": up, "anthropic_base_url": up}}).start()
        try:
            data = httpx.post(
                server.url + "/v1/messages",
                timeout=30,
                json={"model": "m", "max_tokens": 10, "messages": QUESTION, "tools": TOOLS},
            ).json()
        finally:
            server.stop()
    assert [block["type"] for block in data["content"]] == ["text"] and data["stop_reason"] == "end_turn"
    assert "future_tool_use" in data["content"][0]["text"]


# --- streaming ------------------------------------------------------------------------------------


def _events(client, model):
    return list(client.messages.create(model=model, max_tokens=256, messages=QUESTION, tools=TOOLS, stream=True))


def test_streamed_text_passes_and_a_valid_call_arrives_whole_after_it(client):
    events = _events(client, "valid")
    kinds = [e.type for e in events]
    text = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert "".join(text) == "Let me look that up." and len(text) == 5
    [json_part] = [e for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert json_part.index == 1 and kinds.index("content_block_delta") < kinds.index("message_delta")
    [delta] = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_reason == "tool_use" and delta.reflection["actions"] == ["allow"]
    assert kinds[-1] == "message_stop"


def test_the_stream_helper_assembles_the_checked_message(client):
    with client.messages.stream(model="hallucinated", max_tokens=256, messages=QUESTION, tools=TOOLS) as stream:
        message = stream.get_final_message()
    assert _calls(message) == [("get_weather", {"city": "Paris", "days": 2})]
    assert [block.type for block in message.content] == ["tool_use"]


def test_a_streamed_reask_shows_the_model_its_whole_turn(client, upstream):
    with client.messages.stream(model="chatty", max_tokens=256, messages=QUESTION, tools=TOOLS) as stream:
        message = stream.get_final_message()
    assert _text(message) == "Let me check that for you."
    assert _calls(message) == [("get_weather", {"city": "Paris", "days": 2})]
    turn = upstream.requests[-1]["messages"][1]
    assert turn["content"][0] == {"type": "text", "text": "Let me check that for you."}
    assert (turn["content"][1]["name"], turn["content"][1]["input"]) == ("get_forecast_for_city", {"city": "Paris"})


def test_a_streamed_call_that_stays_refused_becomes_text(client):
    with client.messages.stream(model="stubborn", max_tokens=256, messages=QUESTION, tools=TOOLS) as stream:
        message = stream.get_final_message()
    plain, _ = _create(client, "stubborn")
    assert _calls(message) == [] and message.stop_reason == "end_turn"
    assert _text(message) == _text(plain)


def test_an_upstream_error_on_a_streamed_reask_ends_the_stream_with_an_error(client):
    with pytest.raises(anthropic.APIStatusError, match="slow down"):
        _events(client, "reask-limited")


# --- keys ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, upstream):
    config = {
        "service": {"api_keys": [SERVICE_KEY]},
        "upstream": {"base_url": upstream.base_url, "anthropic_base_url": upstream.base_url},
    }
    server = ServiceProcess(tmp_path_factory.mktemp("keyed"), config).start()
    yield server
    server.stop()


def test_the_service_key_rides_in_its_own_header_and_the_anthropic_key_passes(keyed, upstream):
    with anthropic.Anthropic(
        base_url=keyed.url, api_key=ANTHROPIC_KEY, max_retries=0, default_headers={"x-reflection-api-key": SERVICE_KEY}
    ) as c:
        _create(c, "valid")
    sent = upstream.headers[-1]
    assert _key(sent) == ANTHROPIC_KEY
    assert all(SERVICE_KEY not in value for value in sent.values())
    assert (
        _post(keyed.url, "valid", {"x-reflection-api-key": SERVICE_KEY, "x-api-key": ANTHROPIC_KEY}).status_code == 200
    )
    assert upstream.headers[-1]["x-api-key"] == ANTHROPIC_KEY


def test_a_service_key_sent_as_x_api_key_is_never_forwarded(keyed, upstream):
    with anthropic.Anthropic(base_url=keyed.url, api_key=SERVICE_KEY, max_retries=0) as c:
        _create(c, "valid")
    assert all(SERVICE_KEY not in value for value in upstream.headers[-1].values())
    assert _post(keyed.url, "valid", {"x-api-key": SERVICE_KEY}).status_code == 200
    assert all(SERVICE_KEY not in value for value in upstream.headers[-1].values())
    assert _post(keyed.url, "valid", {"x-api-key": ANTHROPIC_KEY}).status_code == 401  # no service key
    with anthropic.Anthropic(base_url=keyed.url, api_key=ANTHROPIC_KEY, max_retries=0) as c:
        with pytest.raises(anthropic.AuthenticationError):
            _create(c, "valid")


def test_the_gateways_anthropic_key_replaces_the_clients(tmp_path, upstream):
    config = {
        "upstream": {
            "base_url": upstream.base_url,
            "anthropic_base_url": upstream.base_url,
            "anthropic_api_key_env": "TEST_ANTHROPIC_KEY",
        }
    }
    server = ServiceProcess(tmp_path, config, env={"TEST_ANTHROPIC_KEY": "sk-ant-gateway-987654321"}).start()
    try:
        with anthropic.Anthropic(base_url=server.url, api_key=ANTHROPIC_KEY, max_retries=0) as c:
            _create(c, "valid")
    finally:
        server.stop()
    assert upstream.headers[-1]["x-api-key"] == "sk-ant-gateway-987654321"
    assert "authorization" not in upstream.headers[-1]  # the client's own key stays home


def test_without_an_anthropic_upstream_the_route_is_404(tmp_path, upstream):
    server = ServiceProcess(tmp_path, {"upstream": {"base_url": upstream.base_url}}).start()
    try:
        response = httpx.post(server.url + "/v1/messages", json={"model": "m", "messages": QUESTION}, timeout=30)
    finally:
        server.stop()
    assert response.status_code == 404 and "anthropic_base_url" in response.json()["detail"]


def test_an_upstream_error_echoing_a_key_is_redacted(tmp_path):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.dumps(
                {
                    "type": "error",
                    "error": {
                        "type": "authentication_error",
                        "message": (f"bad keys: {self.headers.get('x-api-key')} {self.headers.get('authorization')}"),
                    },
                }
            ).encode()
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.send_header("x-echo", str(self.headers.get("x-api-key")))
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    echo = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    up = f"http://127.0.0.1:{echo.server_address[1]}/v1"
    config = {"upstream": {"base_url": up, "anthropic_base_url": up, "anthropic_api_key_env": "TEST_ANTHROPIC_KEY"}}
    server = ServiceProcess(tmp_path, config, env={"TEST_ANTHROPIC_KEY": "sk-ant-gateway-987654321"}).start()
    try:
        with anthropic.Anthropic(base_url=server.url, api_key=ANTHROPIC_KEY, max_retries=0) as c:
            with pytest.raises(anthropic.AuthenticationError) as caught:
                _create(c, "valid")
            with pytest.raises(anthropic.AuthenticationError) as plain:
                c.messages.create(model="valid", max_tokens=10, messages=QUESTION)  # no tools: passed through
    finally:
        server.stop()
        echo.shutdown()
        echo.server_close()
    for error in (caught.value, plain.value):
        assert "sk-ant-gateway-987654321" not in error.response.text and "[redacted]" in error.response.text
        assert all("sk-ant-gateway" not in value for value in error.response.headers.values())


def test_an_escalated_call_is_held_for_approval_and_said_so(tmp_path, upstream):
    config = {
        "upstream": {"base_url": upstream.base_url, "anthropic_base_url": upstream.base_url},
        "gate": {"on_invalid": "escalate"},
    }
    server = ServiceProcess(tmp_path, config).start()
    try:
        with anthropic.Anthropic(base_url=server.url, api_key="sk", max_retries=0) as c:
            message, headers = _create(c, "stubborn")
    finally:
        server.stop()
    assert _calls(message) == [] and headers["x-reflection-actions"] == "escalate"
    assert message.reflection["escalated"][0]["call"]["name"] == "get_forecast_for_city"
    assert "waiting for a person's approval" in _text(message)  # for clients that drop `reflection`
