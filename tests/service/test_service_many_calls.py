"""A request with many calls: the answer is the one the library gives, built in slices so the
service answers its other clients between them (issue 22: a 1,024-call request)."""

from __future__ import annotations

import anyio
import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from reflection import Gate, Reflector, ReflectionConfig  # noqa: E402
from reflection._json import dumps  # noqa: E402
from reflection.pipeline import check_static  # noqa: E402
from reflection.rows import result_row  # noqa: E402
from reflection.service import app as service_app  # noqa: E402

TOOLS = [
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    }
]
HISTORY = [{"role": "user", "content": "The weather in Paris for the next 3 days, please."}]
# Valid calls, wrong types, missing and unknown arguments: every kind of result in one answer.
CALLS = [
    {"name": "get_weather", "arguments": args}
    for args in [{"city": "Paris", "days": 3}, {"city": "Paris", "days": "3"}, {"days": 3}, {"city": "Paris", "x": 1}]
    * 20
]
ROW = {"id": "many", "call": CALLS, "tools": TOOLS, "history": HISTORY}


def _post(path: str) -> httpx.Response:
    # The service as it runs (its lifespan builds each tenant's reflector and gate), in process.
    with TestClient(service_app.create_app(ReflectionConfig())) as client:
        return client.post(path, json=ROW)


def _without_latency(value: object) -> object:
    # Latencies are measured, so they differ run to run; everything else is the same bytes' JSON.
    if isinstance(value, dict):
        return {key: _without_latency(item) for key, item in value.items() if key != "latency_ms"}
    if isinstance(value, list):
        return [_without_latency(item) for item in value]
    return value


def test_many_calls_on_check_get_the_row_the_library_gives():
    answer = _post("/v1/check")
    assert answer.status_code == 200
    expected = result_row("many", check_static(CALLS, TOOLS, judge_skipped=service_app.STATIC_ONLY))
    assert _without_latency(answer.json()) == _without_latency(anyio.run(lambda: _roundtrip(expected)))
    assert [r["overall_valid"] for r in answer.json()["results"]] == [True, False, False, False] * 20


def test_many_calls_on_reflect_get_the_row_the_library_gives():
    answer = _post("/v1/reflect")

    async def reflect() -> dict:
        async with Reflector() as reflector:
            return result_row("many", await reflector.reflect(CALLS, TOOLS, HISTORY))

    assert answer.status_code == 200
    assert _without_latency(answer.json()) == _without_latency(anyio.run(lambda: _roundtrip_async(reflect)))


def test_many_calls_on_gate_get_one_decision_each_in_order():
    answer = _post("/v1/gate")

    async def decide() -> list[dict]:
        decisions = await Gate(ReflectionConfig()).check(CALLS, TOOLS, HISTORY)
        return [d.model_dump(mode="json") for d in decisions]

    assert answer.status_code == 200
    assert _without_latency(answer.json()) == {"id": "many", "decisions": _without_latency(anyio.run(decide))}
    assert answer.headers["x-reflection-actions"] == ",".join(["allow", "modify", "reflect", "reflect"] * 20)
    # Written decision by decision, it is still the compact JSON the service writes everywhere.
    assert answer.content == dumps(answer.json()).encode()


async def _roundtrip(row: dict) -> dict:
    from reflection._json import dumps, parse_json

    return parse_json(dumps(row))


async def _roundtrip_async(make) -> dict:
    return await _roundtrip(await make())


def test_many_calls_answers_are_compact_json_on_every_route():
    for path in ("/v1/check", "/v1/reflect", "/v1/gate"):
        answer = _post(path)
        assert answer.content == dumps(answer.json()).encode(), path
        assert int(answer.headers["content-length"]) == len(answer.content)


@pytest.mark.parametrize("path", ["/v1/check", "/v1/reflect", "/v1/gate"])
def test_a_large_request_hands_the_event_loop_back_while_it_is_served(path):
    # Another task on the service's event loop counts its turns while a 1,024-call request is
    # read, checked, dumped and written: in one block it would get none until the answer is done.
    row = {**ROW, "call": (CALLS * 13)[:1024]}
    turns = 0
    stop = False

    async def count() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await anyio.sleep(0)

    with TestClient(service_app.create_app(ReflectionConfig())) as client:
        assert client.portal is not None
        counting = client.portal.start_task_soon(count)
        before = turns
        answer = client.post(path, json=row)
        during = turns - before
        stop = True
        counting.result()
    assert answer.status_code == 200
    assert during >= 20, during


def test_check_call_by_call_gives_the_library_row_for_every_kind_of_call():
    # Checked one call at a time between slices, a turn still gets the library's results: calls
    # in several shapes, unreadable arguments, unknown tools, no name, and a message form.
    calls = [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": '}},
        {"type": "tool_use", "id": "t1", "name": "get_weathr", "input": {"city": "Paris"}},
        {"name": "", "arguments": {}},
        {"name": "get_weather", "arguments": {"city": "Paris", "days": 0}},
    ]
    for call in (calls, {"role": "assistant", "tool_calls": calls[:2]}):
        with TestClient(service_app.create_app(ReflectionConfig())) as client:
            answer = client.post("/v1/check", json={"id": "kinds", "call": call, "tools": TOOLS})
        expected = result_row("kinds", check_static(call, TOOLS, judge_skipped=service_app.STATIC_ONLY))
        assert answer.status_code == 200
        assert _without_latency(answer.json()) == _without_latency(anyio.run(lambda: _roundtrip(expected)))


@pytest.mark.parametrize("count", [0, 1, 2, 100, 3000])
def test_an_answer_in_pieces_is_the_compact_json_of_the_whole(count):
    # Items of every size around the message size, so messages end on and off item boundaries.
    items = [{"n": i, "text": "x" * (i * 37 % 5000)} for i in range(count)]
    response = service_app._in_pieces({"id": "p"}, "items", [dumps(item).encode() for item in items])
    messages: list[dict] = []

    async def send(message: dict) -> None:
        messages.append(message)

    anyio.run(response, {"type": "http"}, None, send)
    body = b"".join(m["body"] for m in messages[1:])
    assert body == dumps({"id": "p", "items": items}).encode()
    assert dict(messages[0]["headers"])[b"content-length"] == str(len(body)).encode()
    assert [m["more_body"] for m in messages[1:]] == [True] * (len(messages) - 2) + [False]
