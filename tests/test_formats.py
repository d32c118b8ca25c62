"""Normalisation of every supported tool, call and history shape."""

import pytest

from reflection.formats import normalize_call, normalize_calls, normalize_history, normalize_tools
from reflection.model import ToolCall

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(
    ("raw", "fmt"),
    [
        ({"type": "function", "function": {"name": "w", "description": "d", "parameters": PARAMS}}, "openai"),
        ({"name": "w", "description": "d", "parameters": PARAMS}, "function"),
        ({"name": "w", "description": "d", "input_schema": PARAMS}, "anthropic"),
        ({"name": "w", "description": "d", "inputSchema": PARAMS}, "mcp"),
    ],
)
def test_tool_shapes_normalise_to_the_same_schema(raw, fmt):
    inventory = normalize_tools([raw])
    (tool,) = inventory.tools
    assert (tool.name, tool.description, tool.parameters, tool.source_format) == ("w", "d", PARAMS, fmt)


def test_bfcl_type_names_map_to_json_schema_at_any_depth():
    raw = {
        "name": "f",
        "parameters": {
            "type": "dict",
            "properties": {
                "x": {"type": "float"},
                "t": {"type": "tuple", "items": {"type": "any"}},
                "o": {"type": "dict", "properties": {"n": {"type": "int"}}},
            },
        },
    }
    params = normalize_tools([raw]).tools[0].parameters
    assert params["type"] == "object"
    assert params["properties"]["x"] == {"type": "number"}
    assert params["properties"]["t"] == {"type": "array", "items": {}}
    assert params["properties"]["o"]["properties"]["n"] == {"type": "integer"}


def test_parameter_list_form_builds_properties_and_required():
    raw = {
        "name": "read_file",
        "parameters": [
            {"name": "file_path", "type": "str", "required": True},
            {"name": "limit", "type": "int", "required": False, "default": 10},
        ],
    }
    tool = normalize_tools([raw]).tools[0]
    assert tool.source_format == "parameter_list"
    assert tool.parameters == {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
        "required": ["file_path"],
    }


def test_broken_spec_is_a_problem_not_an_exception():
    inventory = normalize_tools([{"name": "ok"}, 7, {"name": "bad", "parameters": "nope"}, {"description": "no name"}])
    assert [t.name for t in inventory.tools] == ["ok"]
    assert [(p.index, p.name) for p in inventory.problems] == [(1, None), (2, "bad"), (3, None)]
    assert "must be an object" in inventory.problems[0].message


def test_no_specs_is_marked_empty():
    assert normalize_tools([]).empty and normalize_tools(None).empty


def test_non_object_parameters_schema_is_a_problem():
    inventory = normalize_tools([{"name": "f", "parameters": {"type": "string"}}])
    assert inventory.tools == () and "must describe an object" in inventory.problems[0].message


def test_duplicate_tool_names_keep_the_first_and_report():
    inventory = normalize_tools([{"name": "f", "description": "one"}, {"name": "f", "description": "two"}])
    assert inventory.get("f").description == "one"
    assert "more than once" in inventory.problems[0].message


def test_openai_call_with_string_arguments():
    call = normalize_call({"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}})
    assert (call.id, call.name, call.arguments, call.raw_arguments, call.error) == (
        "c1",
        "w",
        {"city": "Oslo"},
        '{"city": "Oslo"}',
        None,
    )


def test_openai_call_with_object_arguments():
    assert normalize_call({"type": "function", "function": {"name": "w", "arguments": {"a": 1}}}).arguments == {"a": 1}


def test_anthropic_tool_use_call():
    call = normalize_call({"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}})
    assert (call.id, call.name, call.arguments) == ("toolu_1", "w", {"city": "Oslo"})


@pytest.mark.parametrize("key", ["arguments", "args", "input_parameters"])
def test_plain_call_argument_keys(key):
    assert normalize_call({"name": "w", key: {"a": 1}}).arguments == {"a": 1}


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": 1} trailing', '{"a": 1'])
def test_unparseable_arguments_carry_the_parse_error(text):
    call = normalize_call({"name": "w", "arguments": text})
    assert call.arguments is None and call.error.startswith("arguments are not valid JSON")


def test_non_object_arguments_are_an_error():
    assert normalize_call({"name": "w", "arguments": "[1, 2]"}).error == "arguments must be a JSON object, got an array"


def test_empty_string_arguments_are_an_empty_object():
    call = normalize_call({"name": "w", "arguments": ""})
    assert call.arguments == {} and call.error is None


def test_python_nan_in_arguments_is_a_data_error():
    assert "NaN" in normalize_call({"name": "w", "arguments": {"x": float("nan")}}).error


def test_big_integers_survive_exactly():
    assert normalize_call({"name": "w", "arguments": '{"n": 123456789012345678901234567890}'}).arguments == {
        "n": 123456789012345678901234567890
    }


def test_assistant_message_with_tool_calls_gives_each_call():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}},
        ],
    }
    assert [c.name for c in normalize_calls(message)] == ["x", "y"]


def test_anthropic_assistant_message_gives_its_tool_use_blocks():
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hm"}, {"type": "tool_use", "id": "t", "name": "x", "input": {}}],
    }
    assert [c.name for c in normalize_calls(message)] == ["x"]


@pytest.mark.parametrize("raw", [5, "not json", [], None, {"arguments": {}}])
def test_unreadable_calls_become_calls_with_an_error(raw):
    (call,) = normalize_calls(raw)
    assert call.error


def test_non_json_objects_raise_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="^call:"):
        normalize_call({"name": "w", "arguments": {"when": object()}})
    with pytest.raises(TypeError, match="^tools:"):
        normalize_tools([{"name": "w", "parameters": {1: "x"}}])
    with pytest.raises(TypeError, match="^history:"):
        normalize_history([{"role": "user", "content": {1, 2}}])


def test_bare_string_history_is_one_user_message():
    history = normalize_history("hello")
    assert [(m.role, m.content) for m in history.messages] == [("user", "hello")]


def test_openai_history_keeps_tool_calls_and_names_tool_results():
    history = normalize_history(
        [
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    assert [m.role for m in history.messages] == ["system", "user", "assistant", "tool"]
    assert history.messages[2].tool_calls[0].name == "w"
    assert (history.messages[3].tool_call_id, history.messages[3].name) == ("c1", "w")


def test_anthropic_content_blocks_split_tool_results_into_tool_messages():
    history = normalize_history(
        [
            {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Oslo"}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "rain"}]}
                ],
            },
        ]
    )
    roles = [(m.role, m.content, m.name) for m in history.messages]
    assert roles == [("user", "weather in Oslo?", None), ("assistant", "", None), ("tool", "rain", "w")]


def test_unreadable_history_messages_are_skipped_and_reported():
    history = normalize_history([{"role": "user", "content": "hi"}, 42, {"role": "wizard", "content": "x"}])
    assert len(history.messages) == 1
    assert len(history.problems) == 2 and "unknown role" in history.problems[1]


def test_a_list_of_tool_calls_passes_through():
    calls = [ToolCall(name="a", arguments={}), ToolCall(name="b", arguments={"x": 1})]
    assert normalize_calls(calls) == calls
