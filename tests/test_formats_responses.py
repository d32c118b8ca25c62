"""Reading the Responses API's and Anthropic's own items: function_call items, their outputs as
history, and provider-hosted tools that are not specs."""

from __future__ import annotations

import json

import pytest

from reflection import check_call
from reflection.formats import normalize_calls, normalize_history, normalize_tools
from reflection.rows import parse_line, read_row

FUNCTION = {
    "type": "function",
    "name": "get_weather",
    "description": "The forecast.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "status": "completed",
}


def test_a_function_call_item_is_read_with_its_call_id():
    [call] = normalize_calls([CALL])
    assert (call.name, call.arguments, call.id) == ("get_weather", {"city": "Paris"}, "call_1")


def test_responses_input_items_are_read_as_history():
    history = normalize_history(
        [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think Tokyo"}]},
            CALL,
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ]
    )
    assert not history.problems
    assert [m.role for m in history.messages] == ["user", "assistant", "tool"]
    assert history.messages[1].tool_calls[0].id == "call_1"
    assert (history.messages[2].content, history.messages[2].tool_call_id, history.messages[2].name) == (
        "sunny",
        "call_1",
        "get_weather",
    )
    assert all("Tokyo" not in m.content for m in history.messages)  # reasoning is never conversation


HOSTED = [
    {"type": "web_search"},
    FUNCTION,
    {"type": "file_search", "vector_store_ids": ["v"]},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
]


@pytest.mark.parametrize("form", ["list", "str", "bytes"])
def test_hosted_tools_are_not_specs_and_break_nothing(form):
    # As objects, as JSON text, and as the bytes `reflection check` reads (its spec-by-spec cache).
    raw = {"list": HOSTED, "str": json.dumps(HOSTED), "bytes": json.dumps(HOSTED).encode()}[form]
    inventory = normalize_tools(raw)
    assert [t.name for t in inventory.tools] == ["get_weather"] and not inventory.problems


def test_a_call_to_a_hosted_tool_reads_the_same_from_a_row_as_from_objects():
    tools = [{"type": "web_search_20250305", "name": "web_search"}, FUNCTION]
    call = {"name": "web_search", "arguments": {"query": "Paris"}}
    as_objects = check_call(call, tools)
    row = read_row(parse_line(json.dumps({"id": "r", "call": call, "tools": tools}).encode()), 1)
    from_row = check_call(row.call, row.tools)
    assert from_row.model_dump() == as_objects.model_dump()
    assert not from_row.checks["non_existent_function"].passed


def test_anthropic_custom_tools_with_a_schema_are_specs():
    inventory = normalize_tools([{"type": "custom", "name": "get_weather", "input_schema": FUNCTION["parameters"]}])
    assert [t.name for t in inventory.tools] == ["get_weather"]
