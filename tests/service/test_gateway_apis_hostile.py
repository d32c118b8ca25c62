"""The gateway's Responses and Messages routes in front of an upstream that streams what a careless or
hostile model server sends: calls never announced, calls in snapshots, events that are not JSON,
unknown indexes, interleaved parts, streams that stop early. Nothing unchecked reaches the client
(official `openai` and `anthropic` clients), and what cannot be read ends the stream with an error."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from _fixed_upstream import ByModelUpstream, sse  # noqa: E402
from _service_support import ServiceProcess  # noqa: E402

SCHEMA = {
    "type": "object",
    "required": ["city"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
}
PURGE = {"type": "object", "properties": {"filter": {"type": "string"}, "dry_run": {"type": "boolean"}}}
R_TOOLS = [
    {"type": "function", "name": "get_weather", "parameters": SCHEMA},
    {"type": "function", "name": "purge", "parameters": PURGE},
]
A_TOOLS = [{"name": "get_weather", "input_schema": SCHEMA}, {"name": "purge", "input_schema": PURGE}]
QUESTION = "What's the weather in Paris for the next 2 days? Also purge tmp-* as a dry run."
GOOD_ARGS = {"city": "Paris", "days": 2}
PURGE_ARGS = {"filter": "tmp-*", "dry_run": True}


# --- Responses events -------------------------------------------------------------------------------


def _item(index: int, name: str, arguments: str) -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{index}",
        "call_id": f"call_{index}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _added(index: int, item: dict) -> dict:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _r_call(index: int, name: str, arguments: dict) -> list[dict]:
    item = _item(index, name, json.dumps(arguments))
    return [
        _added(index, {**item, "arguments": ""}),
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item["id"],
            "output_index": index,
            "delta": item["arguments"],
        },
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _response(output: list, status: str = "completed") -> dict:
    return {
        "id": "resp_hostile",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": "m",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }


def _completed(output: list) -> dict:
    return {"type": "response.completed", "response": _response(output)}


BAD = ("get_forecast_for_city", {"city": "Paris"})
RESPONSES = {
    # A call only the terminal response lists, never streamed: still gated.
    "r-unstreamed-call": sse(
        {"type": "response.created", "response": _response([], "in_progress")},
        _completed([_item(0, BAD[0], json.dumps(BAD[1]))]),
    ),
    # A call in the `response.created` snapshot: never shown before it is checked.
    "r-created-with-call": sse(
        {"type": "response.created", "response": _response([_item(0, BAD[0], json.dumps(BAD[1]))], "in_progress")},
        _completed([]),
    ),
    "r-not-json": sse(*_r_call(0, *BAD)[:1], b"data: {not json\n\n", _completed([])),
    "r-unknown-index": sse(
        {"type": "response.function_call_arguments.delta", "item_id": "fc_7", "output_index": 7, "delta": "{}"},
        _completed([]),
    ),
    "r-no-terminal": sse(*_r_call(0, "get_weather", GOOD_ARGS)),
    "r-nan": sse(
        *_r_call(0, *BAD),
        b'event: response.completed\ndata: {"type": "response.completed", "response": '
        + json.dumps(_response([_item(0, BAD[0], json.dumps(BAD[1]))])).encode()[:-1]
        + b', "x": NaN}}\n\n',
    ),
    # purge's item announced with empty arguments, then get_weather whole, then purge's arguments.
    "r-huge-event": sse(*_r_call(0, "get_weather", {"city": "P" * 400_000}), _completed([])),
    "r-many-calls": _response([_item(i, "get_weather", json.dumps(GOOD_ARGS)) for i in range(1100)]),
    "r-interleaved": sse(
        _added(0, {**_item(0, "purge", ""), "status": "in_progress"}),
        *_r_call(1, "get_weather", GOOD_ARGS),
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_0",
            "output_index": 0,
            "delta": json.dumps(PURGE_ARGS),
        },
        _completed([]),
    ),
}


# --- Anthropic events -------------------------------------------------------------------------------


def _start(content: list | None = None) -> dict:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_h",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": content or [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    }


def _use_start(index: int, name: str) -> dict:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}},
    }


def _json_part(index: int, text: str) -> dict:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": text}}


def _stop(index: int) -> dict:
    return {"type": "content_block_stop", "index": index}


_END = (
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    },
    {"type": "message_stop"},
)
MESSAGES = {
    "a-unknown-block": sse(_start(), _json_part(3, "{}"), *_END),
    "a-no-stop": sse(_start(), _use_start(0, "get_weather"), _json_part(0, json.dumps(GOOD_ARGS)), _stop(0)),
    "a-not-json": sse(_start(), _use_start(0, BAD[0]), b"event: content_block_delta\ndata: {nope\n\n", *_END),
    "a-start-with-call": sse(_start([{"type": "tool_use", "id": "toolu_x", "name": BAD[0], "input": BAD[1]}]), *_END),
    "a-interleaved": sse(
        _start(),
        _use_start(0, "purge"),
        _use_start(1, "get_weather"),
        _json_part(0, '{"filter": "tmp-*", '),
        _json_part(1, json.dumps(GOOD_ARGS)),
        _json_part(0, '"dry_run": true}'),
        _stop(1),
        _stop(0),
        *_END,
    ),
    "a-huge-event": sse(
        _start(), _use_start(0, "get_weather"), _json_part(0, '{"city": "' + "P" * 400_000 + '"}'), _stop(0), *_END
    ),
    "a-many-calls": sse(_start(), *(_use_start(i, "get_weather") for i in range(1100)), *_END),
    "a-input-not-object": sse(_start(), _use_start(0, "get_weather"), _json_part(0, "[1, 2]"), _stop(0), *_END),
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with ByModelUpstream({**RESPONSES, **MESSAGES}) as base_url:
        config = {
            "upstream": {
                "base_url": base_url,
                "anthropic_base_url": base_url,
                "max_reflect_rounds": 0,
                "max_response_bytes": 256 * 1024,
            }
        }
        server = ServiceProcess(tmp_path_factory.mktemp("apis-hostile"), config).start()
        yield server
        server.stop()


@pytest.fixture(scope="module")
def oai(gateway):
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def claude(gateway):
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-x", max_retries=0) as c:
        yield c


def _r_events(client, model: str) -> list:
    return list(client.responses.create(model=model, input=QUESTION, tools=R_TOOLS, stream=True))


def _r_calls(events) -> list[tuple[str, dict]]:
    return [
        (e.item.name, json.loads(e.item.arguments))
        for e in events
        if e.type == "response.output_item.done" and e.item.type == "function_call"
    ]


def test_a_call_never_streamed_but_listed_at_the_end_is_gated(oai):
    events = _r_events(oai, "r-unstreamed-call")
    assert _r_calls(events) == []
    completed = events[-1].response
    assert [item.type for item in completed.output] == ["message"]
    assert completed.reflection["decisions"][0]["tool"] == "get_forecast_for_city"
    assert completed.reflection["actions"] == ["deny"]


def test_a_call_in_the_created_snapshot_is_never_shown(oai):
    events = _r_events(oai, "r-created-with-call")
    assert events[0].type == "response.created" and events[0].response.output == []


@pytest.mark.parametrize("model", ["r-not-json", "r-unknown-index", "r-no-terminal"])
def test_a_responses_stream_that_cannot_be_read_ends_with_an_error_and_no_call(oai, model):
    seen = []
    with pytest.raises(openai.APIError):
        for event in oai.responses.create(model=model, input=QUESTION, tools=R_TOOLS, stream=True):
            seen.append(event)
    assert not [e for e in seen if getattr(e, "item", None) is not None and e.item.type == "function_call"]


def test_a_terminal_event_with_nan_is_read_and_gated(oai):
    events = _r_events(oai, "r-nan")
    assert _r_calls(events) == [] and events[-1].response.reflection["actions"] == ["deny"]


def test_interleaved_responses_arguments_are_assembled_by_output_index(oai):
    events = _r_events(oai, "r-interleaved")
    assert sorted(_r_calls(events)) == [("get_weather", GOOD_ARGS), ("purge", PURGE_ARGS)]
    indexes = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert indexes == [0, 1] and [e.sequence_number for e in events] == list(range(len(events)))


def _a_events(client, model: str) -> list:
    return list(
        client.messages.create(
            model=model, max_tokens=64, messages=[{"role": "user", "content": QUESTION}], tools=A_TOOLS, stream=True
        )
    )


def _a_calls(client, model: str) -> tuple[list[tuple[str, dict]], object]:
    with client.messages.stream(
        model=model, max_tokens=64, messages=[{"role": "user", "content": QUESTION}], tools=A_TOOLS
    ) as stream:
        message = stream.get_final_message()
    return [(b.name, b.input) for b in message.content if b.type == "tool_use"], message


@pytest.mark.parametrize("model", ["a-unknown-block", "a-no-stop", "a-not-json"])
def test_a_messages_stream_that_cannot_be_read_ends_with_an_error_and_no_call(claude, model):
    seen = []
    with pytest.raises(anthropic.APIError):
        for event in claude.messages.create(
            model=model, max_tokens=64, tools=A_TOOLS, stream=True, messages=[{"role": "user", "content": QUESTION}]
        ):
            seen.append(event)
    assert not [e for e in seen if e.type == "content_block_start" and e.content_block.type == "tool_use"]


def test_a_call_in_message_start_is_never_shown(claude):
    events = _a_events(claude, "a-start-with-call")
    assert events[0].type == "message_start" and events[0].message.content == []
    assert not [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]


def test_interleaved_input_json_parts_are_assembled_by_block_index(claude):
    calls, message = _a_calls(claude, "a-interleaved")
    assert sorted(calls) == [("get_weather", GOOD_ARGS), ("purge", PURGE_ARGS)]
    assert message.stop_reason == "tool_use"


def test_input_that_is_not_an_object_is_refused(claude):
    calls, message = _a_calls(claude, "a-input-not-object")
    assert calls == [] and message.stop_reason == "end_turn"
    assert "was blocked by reflection" in message.content[0].text


def test_too_many_calls_are_refused(oai, claude):
    with pytest.raises(openai.APIStatusError) as caught:
        oai.responses.create(model="r-many-calls", input=QUESTION, tools=R_TOOLS)
    assert caught.value.status_code == 502 and "tool calls" in caught.value.response.text
    with pytest.raises(anthropic.APIError, match="tool calls"):
        _a_events(claude, "a-many-calls")


def test_an_event_past_max_response_bytes_ends_the_stream_with_an_error(oai, claude):
    with pytest.raises(openai.APIError, match="max_response_bytes"):
        _r_events(oai, "r-huge-event")
    with pytest.raises(anthropic.APIError, match="max_response_bytes"):
        _a_events(claude, "a-huge-event")
