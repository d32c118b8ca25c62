"""The gateway as a real process in front of a hostile upstream (reflection.testing.hostile_upstream),
driven by the official `openai` client where one exists: nothing reaches the client unchecked, the
upstream cannot speak for the gate, keys stay home, and one bad answer fails only its own request."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from _service_support import ServiceProcess  # noqa: E402

from reflection.testing.hostile_upstream import HostileUpstreamProcess  # noqa: E402

pytestmark = pytest.mark.slow  # processes, servers or subprocess CLI runs: `pytest -m "not slow"` leaves them out

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast for a city.",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "purge",
            "description": "Delete files matching a filter.",
            "parameters": {
                "type": "object",
                "properties": {"filter": {"type": "string"}, "dry_run": {"type": "boolean"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "delete_file",
            "description": "Delete one file.",
            "parameters": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}},
        },
    },
]
QUESTION = "What's the weather in Paris for the next 2 days? Also purge tmp-* as a dry run."
CLIENT_KEY = "sk-client-secret-0123456789"
ROUNDS = 2
MAX_BYTES = 256 * 1024


@pytest.fixture(scope="module")
def hostile():
    with HostileUpstreamProcess(idle_timeout=180) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, hostile):
    config = {"upstream": {"base_url": hostile.base_url, "max_reflect_rounds": ROUNDS, "max_response_bytes": MAX_BYTES}}
    server = ServiceProcess(tmp_path_factory.mktemp("hostile-gateway"), config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(gateway):
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0) as c:
        yield c


def _messages(scenario: str) -> list[dict]:
    return [{"role": "user", "content": f"{QUESTION} scenario:{scenario}"}]


def _create(client, scenario: str, **extra):
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=_messages(scenario), tools=TOOLS, **extra
    )
    return raw.parse(), raw.headers


def _calls(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def _stream(client, scenario: str) -> tuple[list[tuple[str, dict]], str, list]:
    """The calls, text and raw chunks a streaming client assembles."""
    calls: dict[int, dict] = {}
    text = []
    chunks = []
    for chunk in client.chat.completions.create(model="m", messages=_messages(scenario), tools=TOOLS, stream=True):
        chunks.append(chunk)
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            for part in choice.delta.tool_calls or []:
                call = calls.setdefault(part.index, {"name": "", "arguments": ""})
                call["name"] += part.function.name or ""
                call["arguments"] += part.function.arguments or ""
    return [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())], "".join(text), chunks


def _reflection(chunks) -> dict:
    found = [getattr(c, "reflection", None) for c in chunks]
    found = [r for r in found if r]
    assert len(found) == 1
    return found[0]


GOOD = ("get_weather", {"city": "Paris", "days": 2})


# --- 19.3: what the strict reader refuses is gated or refused, never passed through ---------------


def test_a_reply_with_nan_in_logprobs_is_gated(client):
    completion, headers = _create(client, "nan-logprobs")
    assert "x-reflection-actions" in headers and completion.reflection["decisions"]


def test_a_streamed_chunk_with_nan_is_gated(client):
    calls, text, chunks = _stream(client, "nan-stream")
    assert ("get_forecast_for_city", {"city": "Paris"}) not in calls
    assert _reflection(chunks)["decisions"]


@pytest.mark.parametrize("scenario", ["cr-sse", "crlf-sse", "multiline-data", "sse-comments"])
def test_every_valid_sse_framing_is_read_and_gated(client, scenario):
    calls, _, chunks = _stream(client, scenario)
    assert all(name != "get_forecast_for_city" for name, _ in calls)
    assert _reflection(chunks)["decisions"][0]["action"] in ("reflect", "allow")


def test_a_legacy_function_call_is_gated(client):
    completion, _ = _create(client, "legacy-function-call")
    message = completion.choices[0].message
    assert completion.reflection["decisions"][0]["tool"] == "get_forecast_for_city"
    assert message.function_call is None or message.function_call.name == "get_weather"


def test_a_streamed_legacy_function_call_is_gated(client):
    names = []
    chunks = list(
        client.chat.completions.create(model="m", messages=_messages("legacy-function-call"), tools=TOOLS, stream=True)
    )
    for chunk in chunks:
        for choice in chunk.choices:
            if choice.delta.function_call and choice.delta.function_call.name:
                names.append(choice.delta.function_call.name)
    assert "get_forecast_for_city" not in names
    assert _reflection(chunks)["decisions"][0]["tool"] == "get_forecast_for_city"


def test_legacy_functions_in_a_request_are_refused(gateway):
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        timeout=30,
        json={"model": "m", "messages": _messages("valid"), "functions": [TOOLS[0]["function"]]},
    )
    assert response.status_code == 400 and "functions" in response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        # A client that cut an emoji in half, and a NaN temperature: both read by Python's json module.
        b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d QUESTION"}], "tools": TOOLS}',
        b'{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "QUESTION"}], "tools": TOOLS}',
    ],
)
def test_a_request_the_strict_reader_refuses_is_still_gated(gateway, body):
    body = body.replace(b"QUESTION", (QUESTION + " scenario:repeat").encode()).replace(
        b"TOOLS", json.dumps(TOOLS).encode()
    )
    response = httpx.post(
        gateway.url + "/v1/chat/completions", content=body, timeout=30, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200
    data = response.json()
    assert data["reflection"]["decisions"] and "tool_calls" not in data["choices"][0]["message"]


def test_a_gzip_request_is_decoded_and_gated(gateway):
    body = json.dumps({"model": "m", "messages": _messages("repeat"), "tools": TOOLS}).encode()
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=gzip.compress(body),
        timeout=30,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert response.status_code == 200 and response.json()["reflection"]["actions"] == ["deny"]


def test_a_request_in_an_unknown_encoding_or_not_json_is_refused(gateway):
    url = gateway.url + "/v1/chat/completions"
    assert httpx.post(url, content=b"xx", headers={"content-encoding": "br"}, timeout=30).status_code == 415
    assert httpx.post(url, content=b"{not json", timeout=30).status_code == 400


# --- 19.4 and 22.7: streamed calls assembled by index; a bad chunk does not kill the stream ----------


def test_interleaved_deltas_are_assembled_by_index(client):
    calls, _, chunks = _stream(client, "interleaved")
    purge = [args for name, args in calls if name == "purge"]
    assert GOOD in calls
    assert all(args == {"filter": "tmp-*", "dry_run": True} for args in purge)  # never purge({})
    assert all(name for name, _ in calls)  # no nameless call


def test_a_tool_call_index_that_is_not_a_number_is_removed_and_the_stream_goes_on(client):
    calls, text, chunks = _stream(client, "unhashable-index")
    assert calls == [] and "could not read" in text
    assert chunks[-1].choices == [] or chunks[-1].choices[0].finish_reason is not None


# --- 19.6 and 20.8: untrusted text stays quoted; notes read the same streamed and not ------------


def test_attacker_names_reach_the_message_only_quoted(client):
    completion, _ = _create(client, "attack-names")
    for line in completion.choices[0].message.content.splitlines():
        assert line.startswith('The call to "'), line


def test_the_note_is_the_same_streamed_and_not(client):
    completion, _ = _create(client, "repeat")
    _, text, _ = _stream(client, "repeat")
    assert completion.choices[0].message.content == text
    assert text.count("The call to") == 1 and "was not run" not in text


# --- 19.7: the upstream cannot speak for the gate; keys stay home -----------------------------------


def test_headers_the_gateway_owns_never_come_from_the_upstream(client):
    _, headers = _create(client, "spoof-headers")
    assert headers["x-reflection-actions"] == "deny"
    for name in (
        "set-cookie",
        "strict-transport-security",
        "access-control-allow-origin",
        "x-hop-secret",
        "proxy-authenticate",
        "alt-svc",
    ):
        assert name not in headers, name


def test_an_upstream_error_echoing_the_key_is_redacted(client):
    with pytest.raises(openai.AuthenticationError) as caught:
        _create(client, "echo-key")
    assert CLIENT_KEY not in caught.value.response.text
    assert all(CLIENT_KEY not in value for value in caught.value.response.headers.values())


# --- 19.1 and 19.2 through the gateway: renamed and narrowed calls never run -------------------------


def test_a_renamed_tool_never_reaches_the_client(client):
    completion, _ = _create(client, "rename")
    assert completion.choices[0].message.tool_calls is None
    assert {d["action"] for d in completion.reflection["decisions"]} == {"reflect"}


def test_a_call_is_never_narrowed(client):
    # `{"type": "object"}` allows any argument: a correction must never drop `filter` and `dry_run`.
    tools = [{"type": "function", "function": {"name": "purge", "parameters": {"type": "object"}}}]
    completion = client.chat.completions.create(model="m", messages=_messages("drop-args"), tools=tools)
    for name, args in _calls(completion.choices[0].message):
        assert (name, args) == ("purge", {"filter": "tmp-*", "dry_run": True})


# --- 20.2 and 22.4: re-asks show the whole turn, once per round; each call once ----------------------


def test_a_reask_shows_the_whole_turn_and_the_final_reply_holds_each_call_once(client, hostile):
    mark = hostile.received()[-1]["seq"] if hostile.received() else 0
    completion, _ = _create(client, "parallel")
    calls = _calls(completion.choices[0].message)
    assert calls.count(GOOD) == 1 and ("get_weather", {"city": "Oslo", "days": 2}) in calls
    ids = [c.id for c in completion.choices[0].message.tool_calls]
    assert len(set(ids)) == len(ids)
    reask = [r for r in hostile.received(since=mark) if r["round"] == 1]
    assert len(reask) == 1
    messages = reask[0]["body"]["messages"]
    assert len(messages[-3]["tool_calls"]) == 2  # the model saw both of its calls
    assert "accepted" in messages[-2]["content"] and "was not run" in messages[-1]["content"]


def test_many_invalid_calls_cost_one_upstream_request_per_round(client, hostile):
    mark = hostile.received()[-1]["seq"] if hostile.received() else 0
    completion, _ = _create(client, "many-invalid:20")
    assert len(hostile.received(since=mark)) == 1 + ROUNDS
    assert len(completion.reflection["decisions"]) == 20 * (1 + ROUNDS)


# --- 20.5: errors and costs of re-asks ----------------------------------------------------------------


def test_an_upstream_error_on_a_reask_reaches_the_client_unchanged(client):
    with pytest.raises(openai.RateLimitError) as caught:
        _create(client, "reask-429")
    assert caught.value.response.headers["retry-after"] == "7"


def test_an_upstream_error_on_a_streamed_reask_ends_the_stream_with_an_error_event(client):
    with pytest.raises(openai.APIError):
        _stream(client, "reask-429")


def test_the_usage_of_every_reask_is_added(client):
    completion, _ = _create(client, "usage")
    assert completion.usage.total_tokens == 110 + 220
    assert completion.reflection["reask_usage"] == [
        {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}
    ]


# --- 22.1 and 22.3: bounded upstream answers fail that request only ---------------------------------


def test_a_reply_with_too_many_calls_is_refused(client):
    with pytest.raises(openai.APIStatusError) as caught:
        _create(client, "many-calls:2000")
    assert caught.value.status_code == 502 and "2000 tool calls" in caught.value.response.text


def test_a_huge_reply_is_refused_and_the_next_request_is_served(client):
    with pytest.raises(openai.APIStatusError) as caught:
        _create(client, "huge-body:1")
    assert caught.value.status_code == 502 and "max_response_bytes" in caught.value.response.text
    completion, _ = _create(client, "valid")
    assert _calls(completion.choices[0].message) == [GOOD]


def test_a_huge_streamed_line_ends_the_stream_with_an_error_event(client):
    with pytest.raises(openai.APIError, match="max_response_bytes"):
        _stream(client, "huge-line:1")


def test_expect_100_continue_is_not_forwarded(gateway, hostile):
    # An upstream that never answers `Expect: 100-continue` would hang the request to its deadline.
    mark = hostile.received()[-1]["seq"] if hostile.received() else 0
    body = {"model": "m", "messages": _messages("valid"), "tools": TOOLS}
    response = httpx.post(
        gateway.url + "/v1/chat/completions", json=body, headers={"expect": "100-continue"}, timeout=30
    )
    assert response.status_code == 200
    assert [r["headers"].get("expect") for r in hostile.received(since=mark)] == [None]


def test_a_stream_past_the_deadline_ends_with_an_error_event(tmp_path, hostile):
    config = {"upstream": {"base_url": hostile.base_url}, "service": {"deadline_seconds": 3}}
    server = ServiceProcess(tmp_path, config).start()
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key=CLIENT_KEY, max_retries=0) as slow:
            with pytest.raises(openai.APIError, match="deadline"):
                _stream(slow, "slow-stream:20")
    finally:
        server.stop()
