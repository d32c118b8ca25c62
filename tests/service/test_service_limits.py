"""The service's limits and refusals, in process (ASGI): calls per request, ambiguous credentials,
strict bodies on every route, ids, and deadlines counted from the request's arrival."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from reflection.config import ReflectionConfig, ServiceConfig  # noqa: E402
from reflection.service._metrics import Metrics  # noqa: E402
from reflection.service._middleware import ARRIVED, ServiceMiddleware  # noqa: E402
from reflection.service.app import create_app  # noqa: E402

TOOLS = [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
GUARDRAIL = "/beta/litellm_basic_guardrail_api"
KEY = "limits-key"


def _post(client, path: str, *, json=None, content: bytes | None = None, headers=None) -> httpx.Response:
    return client.post(path, json=json, content=content, headers=httpx.Headers(headers or {}))


@pytest.fixture(scope="module")
def app():
    with TestClient(create_app(ReflectionConfig(service=ServiceConfig(max_calls_per_request=3)))) as client:
        yield client


# --- calls per request --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/check", "/v1/reflect", "/v1/gate"])
@pytest.mark.parametrize("shape", ["tool_calls", "message"])
def test_more_calls_than_the_cap_get_413_on_every_row_route(app, path, shape):
    calls = [CALL] * 4
    body = (
        {"tool_calls": calls, "tools": TOOLS}
        if shape == "tool_calls"
        else {
            "call": {
                "role": "assistant",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
                ]
                * 4,
            },
            "tools": TOOLS,
        }
    )
    response = _post(app, path, json=body)
    assert response.status_code == 413
    assert "4 tool calls" in response.json()["detail"] and "service.max_calls_per_request" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/check", "/v1/reflect", "/v1/gate"])
def test_calls_up_to_the_cap_are_checked(app, path):
    assert _post(app, path, json={"tool_calls": [CALL] * 3, "tools": TOOLS}).status_code == 200


def test_the_guardrail_caps_calls_too(app):
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert (
        _post(
            app, GUARDRAIL, json={"tool_calls": [call] * 3, "tools": [{"type": "function", "function": TOOLS[0]}]}
        ).json()["action"]
        == "NONE"
    )
    response = _post(app, GUARDRAIL, json={"tool_calls": [call] * 4})
    assert response.status_code == 413 and "service.max_calls_per_request" in response.json()["detail"]


# --- strict bodies and ids ------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b'{"texts": [NaN]}', b'{"texts": ["a"]} x', b'{"texts": ["\\ud800"]}'])
def test_the_guardrail_answers_400_json_for_a_body_the_other_routes_refuse(app, body):
    response = _post(app, GUARDRAIL, content=body)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["detail"].startswith("the body is not valid JSON")


def test_the_guardrail_answers_422_json_for_a_body_of_the_wrong_shape(app):
    response = _post(app, GUARDRAIL, json={"texts": [1.5], "tool_calls": "x"})
    assert response.status_code == 422
    assert {tuple(error["loc"]) for error in response.json()["detail"]} >= {("texts", 0), ("tool_calls",)}


@pytest.mark.parametrize("rid", [{"a": 1}, [1], True, 1.5])
@pytest.mark.parametrize("path", ["/v1/check", "/v1/reflect", "/v1/gate"])
def test_an_id_that_is_not_a_string_or_integer_is_refused_not_renamed(app, path, rid):
    response = _post(app, path, json={"id": rid, "call": CALL, "tools": TOOLS})
    assert response.status_code == 422
    assert response.json()["detail"].startswith('"id" must be a string, an integer or null')


@pytest.mark.parametrize("rid", ["r-1", 7, 2**70, None])
def test_string_integer_and_null_ids_are_kept(app, rid):
    response = _post(app, "/v1/check", json={"id": rid, "call": CALL, "tools": TOOLS})
    assert response.status_code == 200
    assert response.json()["id"] == (str(rid) if rid is not None else "line-1")


# --- the middleware on its own ------------------------------------------------------------------------


def _middleware(app, **overrides):
    options = {
        "api_keys": [],
        "max_body_bytes": 1024,
        "max_in_flight": 4,
        "deadline_seconds": 1.0,
        "metrics": Metrics(),
        "routes": ["/x"],
        **overrides,
    }
    return ServiceMiddleware(app, **options)


async def _drive(
    middleware, state: dict, chunks: list[tuple[bytes, float]], headers: list[tuple[bytes, bytes]] | None = None
) -> list[dict]:
    """Run one request through `middleware` with the body in `chunks` (bytes, delay before it)."""
    sent: list[dict] = []
    queue = list(chunks)

    async def receive() -> dict:
        if not queue:
            await asyncio.sleep(3600)
        body, delay = queue.pop(0)
        await asyncio.sleep(delay)
        return {"type": "http.request", "body": body, "more_body": bool(queue)}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/x", "headers": headers or [], "state": state}
    await middleware(scope, receive, send)
    return sent


def test_the_deadline_counts_from_the_requests_arrival_not_from_when_it_is_handled():
    async def slow(scope, receive, send):
        await asyncio.sleep(5)

    state = {ARRIVED: time.perf_counter() - 0.8}  # queued for 0.8 s of its 1 s deadline
    started = time.perf_counter()
    sent = asyncio.run(_drive(_middleware(slow), state, [(b"{}", 0)]))
    assert sent[0]["status"] == 504
    assert time.perf_counter() - started < 0.6


def test_the_application_gets_the_whole_body_at_once_and_is_counted_only_then():
    seen: dict = {}

    async def echo(scope, receive, send):
        seen["in_flight"] = middleware.in_flight
        seen["message"] = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = _middleware(echo)
    state: dict = {}
    sent = asyncio.run(_drive(middleware, state, [(b'{"a":', 0), (b" 1}", 0.05)]))
    assert sent[0]["status"] == 200
    assert seen == {"in_flight": 1, "message": {"type": "http.request", "body": b'{"a": 1}', "more_body": False}}
    assert ARRIVED in state and middleware.in_flight == 0


def test_a_body_slower_than_the_body_timeout_gets_408_and_closes_the_connection():
    async def never(scope, receive, send):
        raise AssertionError("the application must not run")

    sent = asyncio.run(_drive(_middleware(never, body_timeout_seconds=0.2), {}, [(b"{", 0), (b"}", 1.0)]))
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("keys", [[KEY], []])
@pytest.mark.parametrize(
    "headers",
    [
        [(b"authorization", f"Bearer {KEY}".encode()), (b"authorization", b"Bearer sk-upstream")],
        [(b"authorization", b"Bearer sk-upstream"), (b"Authorization", f"Bearer {KEY}".encode())],
        [(b"x-reflection-api-key", KEY.encode()), (b"x-reflection-api-key", b"other")],
    ],
)
def test_a_repeated_credential_header_is_refused_as_ambiguous(keys, headers):
    sent = asyncio.run(_drive(_middleware(_ok, api_keys=keys), {}, [(b"{}", 0)], headers))
    assert sent[0]["status"] == 400
    assert b"ambiguous credentials" in sent[1]["body"]


def test_one_credential_of_each_kind_is_not_ambiguous():
    headers = [(b"x-reflection-api-key", KEY.encode()), (b"authorization", b"Bearer sk-upstream")]
    sent = asyncio.run(_drive(_middleware(_ok, api_keys=[KEY]), {}, [(b"{}", 0)], headers))
    assert sent[0]["status"] == 200


# --- large bodies: their calls counted before they are parsed whole -------------------------------

_PAD = "x" * 70_000  # a body over the size whose calls are counted first (app._PRECOUNT_BYTES)
_TOOL_CALL = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
_TOOL_USE = {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"city": "Paris"}}


@pytest.mark.parametrize(
    "row",
    [
        {"tool_calls": [CALL] * 4},
        {"call": [CALL] * 4},
        {"call": {"role": "assistant", "tool_calls": [_TOOL_CALL] * 4}},
        {"call": {"role": "assistant", "content": [{"type": "text", "text": "on it"}, *[_TOOL_USE] * 4]}},
    ],
    ids=["tool_calls", "list", "message", "anthropic"],
)
@pytest.mark.parametrize("path", ["/v1/check", "/v1/reflect", "/v1/gate"])
def test_a_large_body_with_too_many_calls_is_refused_before_it_is_parsed(app, monkeypatch, path, row):
    from reflection.service import app as service_app

    def never(body: bytes) -> None:
        raise AssertionError("parsed whole")

    monkeypatch.setattr(service_app, "parse_line", never)
    body = {**row, "tools": TOOLS, "history": [{"role": "user", "content": _PAD}]}
    response = _post(app, path, json=body)
    assert response.status_code == 413
    assert "4 tool calls" in response.json()["detail"] and "service.max_calls_per_request" in response.json()["detail"]


def test_a_large_guardrail_body_with_too_many_calls_is_refused_before_it_is_parsed(app, monkeypatch):
    from reflection.service import app as service_app

    def never(body: bytes) -> None:
        raise AssertionError("parsed whole")

    monkeypatch.setattr(service_app, "parse_json", never)
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    response = _post(app, GUARDRAIL, json={"tool_calls": [call] * 4, "texts": [_PAD]})
    assert response.status_code == 413 and "4 tool calls" in response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        {"tool_calls": [CALL] * 3},
        {"call": {"role": "assistant", "tool_calls": [_TOOL_CALL] * 3}},
        # Forms the count does not follow are parsed, and then counted: never refused by mistake.
        {"call": {"role": "\\u0061ssistant", "content": [_TOOL_USE] * 3}},
        {"call": {"name": "get_weather", "arguments": {"city": "Paris", "list": [1] * 10}}},
    ],
)
@pytest.mark.parametrize("path", ["/v1/check", "/v1/gate"])
def test_a_large_body_within_the_cap_is_checked(app, path, body):
    response = _post(app, path, json={**body, "tools": TOOLS, "history": [{"role": "user", "content": _PAD}]})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "text",
    [
        b'{"call": [1, 2, 3, 4, 5], "call": {"name": "a"}}',  # the last of duplicate keys counts
        b'{"call": null, "tool_calls": [1, 2, 3, 4, 5]}',  # `call` present: `tool_calls` is not read
        b'{"call": {"role": "assistant", "role": "user", "content": [{"type": "tool_use"}, {"type": "tool_use"}]}}',
        b'{"call": {"role": "assistant", "content": [{"type": "tool_use"}, {"type": "text"}, "x", [1], {"type": "tool_use"}]}}',
        b'{"call": {"tool_calls": "not a list", "role": "assistant", "content": [{"type": "tool_use"}]}}',
        b'{"call": "[1, 2, 3]"}',
        b'{"call": [1, 2, 3], "tools": NaN}',
        b'{"tool_calls": [1, 2, 3]} trailing',
        b"[1, 2, 3]",
    ],
)
def test_the_count_before_parsing_is_never_more_than_the_parsed_rows(text):
    from reflection.formats import count_calls
    from reflection.rows import RowError, parse_line, read_row
    from reflection.formats import count_calls_text as _precount

    try:
        parsed = count_calls(read_row(parse_line(text), 1).call)
    except (ValueError, RowError):
        parsed = 0  # the parse (or the row) refuses it: the count must not claim calls
    assert _precount(text) <= parsed
    assert _precount(text) == parsed or parsed == 0
