"""Hostile input to the checking core (issue 11, items 1, 4, 5, 6, 7, 14, 17 and 19).

Every case goes through the real `reflection check` and `reflection batch` commands (a bad
row must not stop the run: a clean row after it is still written) and through the Python
API, whose results must also serialise. The CLI rows are written as JSON text by hand:
values nested 100,000 levels deep are beyond what `json.dumps` can write.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from reflection import History, Message, ToolCall, ToolSpec, reflect_sync
from reflection._json import MAX_DEPTH
from reflection.cli import app
from reflection.formats import normalize_history
from reflection.grounding import ground_call
from reflection.static import BACKTRACK_LIMIT, MAX_FINDINGS, MAX_LISTED, check_call

runner = CliRunner()

TOOL = {
    "type": "function",
    "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {}, "n": {"type": "integer"}}}},
}
TOOLS_TEXT = json.dumps([TOOL])
CLEAN = '{"id": "after", "tools": %s, "call": {"name": "f", "arguments": {"a": 1}}}' % TOOLS_TEXT


def _cli(command: str, tmp_path: Any, lines: list[str]) -> dict[str, dict[str, Any]]:
    """Run `reflection <command>` on `lines` plus a clean row; the rows written, by id."""
    source = tmp_path / f"{command}-in.jsonl"
    source.write_text("\n".join([*lines, CLEAN]) + "\n", encoding="utf-8")
    out = tmp_path / f"{command}-out.jsonl"
    result = runner.invoke(app, [command, str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == len(lines) + 1
    assert by_id["after"]["overall_valid"] is True  # the run went on past the bad rows
    return by_id


def cli_rows(tmp_path: Any, *lines: str) -> list[dict[str, dict[str, Any]]]:
    """The rows `reflection check` and `reflection batch` write for `lines`, both ways."""
    return [_cli("check", tmp_path, list(lines)), _cli("batch", tmp_path, list(lines))]


def failing(result: dict[str, Any]) -> dict[str, list[str]]:
    """Failing checks of one serialised result (reflection or static), with their messages."""
    checks = result["static"]["checks"] if "static" in result else result["checks"]
    return {name: [f["message"] for f in check["findings"]] for name, check in checks.items() if not check["passed"]}


def api(result: Any) -> dict[str, Any]:
    """A `ReflectionResult` or `StaticResult` as the JSON the CLI writes (it must serialise)."""
    return json.loads(result.model_dump_json())


def nested(depth: int, leaf: Any = 1) -> Any:
    """`depth` containers around `leaf`, objects and arrays in turn, built without recursion."""
    value = leaf
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


def nested_text(depth: int, leaf: str = "1") -> str:
    return (
        "".join('{"a": ' if level % 2 else "[" for level in reversed(range(depth)))
        + leaf
        + "".join("}" if level % 2 else "]" for level in range(depth))
    )


DEEP = f"nesting deeper than {MAX_DEPTH} levels"
DEPTHS = [500, 5000, 100_000]


# --- 1. deep values: a failing check or a warning, at any depth --------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("depth", DEPTHS)
def test_deeply_nested_arguments_fail_invalid_tool_call(tmp_path, depth):
    as_object = '{"id": "object", "tools": %s, "call": {"name": "f", "arguments": {"a": %s}}}' % (
        TOOLS_TEXT,
        nested_text(depth),
    )
    as_text = '{"id": "text", "tools": %s, "call": {"name": "f", "arguments": %s}}' % (
        TOOLS_TEXT,
        json.dumps('{"a": ' + nested_text(depth) + "}"),
    )
    for rows in cli_rows(tmp_path, as_object, as_text):
        for rid in ("object", "text"):
            assert rows[rid]["overall_valid"] is False
            assert list(failing(rows[rid]["results"][0])) == ["invalid_tool_call"]
            assert DEEP in failing(rows[rid]["results"][0])["invalid_tool_call"][0]
    for call in ({"name": "f", "arguments": {"a": nested(depth)}}, ToolCall(name="f", arguments={"a": nested(depth)})):
        assert DEEP in failing(api(check_call(call, [TOOL])))["invalid_tool_call"][0]
        result = api(reflect_sync(call, [TOOL]))
        assert list(failing(result)) == ["invalid_tool_call"] and result["grounding"] == []


@pytest.mark.slow
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deeply_nested_history_message_is_skipped_with_a_warning(tmp_path, depth):
    line = (
        '{"id": "deep", "tools": %s, "history": [{"role": "user", "content": %s}], '
        '"call": {"name": "f", "arguments": {"a": 1}}}' % (TOOLS_TEXT, nested_text(depth))
    )
    for rows in cli_rows(tmp_path, line):
        assert rows["deep"]["overall_valid"] is True
        assert any(DEEP in warning for warning in rows["deep"]["warnings"])
    history = [{"role": "user", "content": "hi"}, {"role": "user", "content": nested(depth)}]
    result = api(reflect_sync({"name": "f", "arguments": {"a": 1}}, [TOOL], history))
    assert result["overall_valid"] is True
    assert result["warnings"] == [f"history message #1 was skipped: {DEEP} (the most that is checked)"]


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deeply_nested_tool_spec_is_an_invalid_api_spec(tmp_path, depth):
    deep_tool = '{"name": "f", "parameters": {"type": "object", "properties": {"a": %s}}}' % nested_text(
        depth, "{}"
    ).replace("[", '{"items": [').replace("]", "]}")
    line = '{"id": "deep", "tools": [%s], "call": {"name": "f", "arguments": {"a": 1}}}' % deep_tool
    for rows in cli_rows(tmp_path, line):
        assert list(failing(rows["deep"]["results"][0])) == ["invalid_api_spec"]
    parameters = {"type": "object", "properties": {"a": nested(depth, {})}}
    for tools in ([{"name": "f", "parameters": parameters}], [ToolSpec(name="f", parameters=parameters)]):
        messages = failing(api(reflect_sync({"name": "f", "arguments": {"a": 1}}, tools)))["invalid_api_spec"]
        assert DEEP in messages[0]


def test_a_hundred_levels_are_still_checked():
    arguments = {"a": nested(MAX_DEPTH - 1)}  # the arguments object is the hundredth level
    assert api(check_call({"name": "f", "arguments": arguments}, [TOOL]))["valid"] is True
    too_deep = {"a": nested(MAX_DEPTH)}
    assert "invalid_tool_call" in failing(api(check_call({"name": "f", "arguments": too_deep}, [TOOL])))


# --- 4 and 19. over-long integers and lone surrogates are bad input ----------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"n": 10**4300},
        {"a": [1, {"b": -(10**5000)}]},
        {"\ud800": 1},
        {"a": {"b\udfff": 1}},
        {"a": ["ok", "\udc80"]},
    ],
)
def test_over_long_integers_and_lone_surrogates_in_arguments_fail_invalid_tool_call(arguments):
    for call in ({"name": "f", "arguments": arguments}, ToolCall(name="f", arguments=arguments)):
        assert list(failing(api(check_call(call, [TOOL])))) == ["invalid_tool_call"]
        assert list(failing(api(reflect_sync(call, [TOOL])))) == ["invalid_tool_call"]


def test_lone_surrogates_in_arguments_text_names_and_ids_are_reported_and_escaped():
    call = {"id": "c\ud800", "type": "function", "function": {"name": "f\udfff", "arguments": '{"a": "\ud800"}'}}
    result = api(reflect_sync(call, [TOOL]))  # serialises: the texts are escaped
    assert "invalid_tool_call" in failing(result)
    assert result["call"]["id"] == "c\\ud800" and result["call"]["name"] == "f\\udfff"
    text_only = api(check_call({"name": "f", "arguments": '{"a": "\ud800"}'}, [TOOL]))
    assert list(failing(text_only)) == ["invalid_tool_call"]
    assert text_only["call"]["raw_arguments"] == '{"a": "\\ud800"}'


def test_lone_surrogates_in_history_and_specs_are_reported_not_sent_on():
    tools = [TOOL, {"name": "g", "description": "bad \ud800 text", "parameters": {"type": "object"}}]
    history = [{"role": "user", "content": "please \udfff"}, {"role": "user", "content": "a is 1"}]
    result = api(reflect_sync({"name": "f", "arguments": {"a": 1}}, tools, history))
    assert result["overall_valid"] is True
    assert any("history message #0 was skipped: a lone surrogate" in w for w in result["warnings"])
    assert any("tool 'g': its spec has a lone surrogate at $.description" in w for w in result["warnings"])
    assert result["grounding"][0]["sources"][0]["message_index"] == 0  # the skipped message is gone
    called = api(reflect_sync({"name": "g", "arguments": {}}, tools))
    assert list(failing(called)) == ["invalid_api_spec"]


def test_over_long_integers_and_surrogate_escapes_in_rows_are_named(tmp_path):
    digits = "1" * 5000
    in_text = '{"id": "text", "tools": %s, "call": {"name": "f", "arguments": "{\\"n\\": %s}"}}' % (TOOLS_TEXT, digits)
    in_row = '{"id": "row", "tools": %s, "call": {"name": "f", "arguments": {"n": %s}}}' % (TOOLS_TEXT, digits)
    escape = '{"id": "escape", "tools": %s, "call": {"name": "f", "arguments": "{\\"\\\\ud800\\": 1}"}}' % TOOLS_TEXT
    for rows in cli_rows(tmp_path, in_text, in_row, escape):
        message = failing(rows["text"]["results"][0])["invalid_tool_call"][0]
        assert "an integer with 5000 digits" in message and "infinity" not in message
        assert "an integer with 5000 digits" in rows["line-2"]["error"]  # the whole line cannot be read
        assert "surrogate" in failing(rows["escape"]["results"][0])["invalid_tool_call"][0]


def test_integers_up_to_the_limit_are_read_exactly(tmp_path):
    big = 10**4299
    line = '{"id": "big", "tools": %s, "call": {"name": "f", "arguments": {"n": %d}}}' % (TOOLS_TEXT, big)
    for rows in cli_rows(tmp_path, line):
        assert rows["big"]["overall_valid"] is True
        assert rows["big"]["results"][0]["call"]["arguments"]["n"] == big
    assert api(check_call({"name": "f", "arguments": f'{{"n": {big}}}'}, [TOOL]))["valid"] is True


# --- 5. a regex the engine gives up on is the spec's problem ----------------------------------

# A backreference inside a look-ahead: matched by backtracking, exponential in the length.
# Every all-"a" value matches it, but the engine gives up on long ones.
HARD_PATTERN = r"^(?!(a*)*\1!)a+$"


def test_a_pattern_the_regex_engine_gives_up_on_fails_invalid_api_spec(tmp_path):
    schema = {
        "type": "object",
        "properties": {"names": {"type": "array", "items": {"type": "string", "pattern": HARD_PATTERN}}},
    }
    tools = [{"name": "tag", "parameters": schema}]
    arguments = {"names": ["a" * (18 + i % 10) for i in range(40)]}
    line = json.dumps({"id": "regex", "tools": tools, "call": {"name": "tag", "arguments": arguments}})
    for rows in cli_rows(tmp_path, line):
        messages = failing(rows["regex"]["results"][0])
        assert list(messages) == ["invalid_api_spec"]
        assert "regex engine gave up" in messages["invalid_api_spec"][0]
        assert str(BACKTRACK_LIMIT) in messages["invalid_api_spec"][0]
    assert list(failing(api(check_call({"name": "tag", "arguments": arguments}, tools)))) == ["invalid_api_spec"]
    short = {"names": ["a" * 5, "a" * 8]}  # within the limit: checked as usual
    assert api(check_call({"name": "tag", "arguments": short}, tools))["valid"] is True


def test_a_pattern_given_up_on_in_a_union_or_a_property_name_is_the_spec_s_problem():
    union = {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": HARD_PATTERN}]}},
    }
    either = {
        "type": "object",
        "properties": {
            "x": {"oneOf": [{"type": "string", "pattern": HARD_PATTERN}, {"type": "string", "maxLength": 1}]}
        },
    }
    names = {"type": "object", "patternProperties": {HARD_PATTERN: {}}, "additionalProperties": False}
    for schema, arguments in ((union, {"x": "a" * 30}), (either, {"x": "a" * 30}), (names, {"a" * 30: 1})):
        result = api(check_call({"name": "t", "arguments": arguments}, [{"name": "t", "parameters": schema}]))
        assert list(failing(result)) == ["invalid_api_spec"]


# --- 6. grounding over a large conversation ---------------------------------------------------


def test_grounding_finds_values_in_a_two_megabyte_tool_output(tmp_path):
    output = "5" * 1_000_000 + " order 4521 shipped to paris " + "x" * 1_000_000
    history = [{"role": "user", "content": "where is my order?"}, {"role": "tool", "content": output}]
    arguments = {"order": 4521, "city": "Paris", **{f"d{i}": i % 10 for i in range(62)}}
    tools = [{"name": "track", "parameters": {"type": "object"}}]
    line = json.dumps(
        {"id": "big", "tools": tools, "history": history, "call": {"name": "track", "arguments": arguments}}
    )
    grounding = api(reflect_sync({"name": "track", "arguments": arguments}, tools, history))["grounding"]
    for rows in cli_rows(tmp_path, line):
        assert rows["big"]["results"][0]["grounding"] == grounding
    assert len(grounding) == 64
    order, city, digit = grounding[0], grounding[1], grounding[2]
    assert order["sources"][0]["kind"] == "tool" and "order 4521 shipped" in order["sources"][0]["quote"]
    assert city["sources"][0]["quote"].endswith("…") and "paris" in city["sources"][0]["quote"]
    assert digit["sources"] == []  # "0" never stands alone: no source among a million fives


@pytest.mark.slow
def test_grounding_walks_wide_arguments_without_listing_every_leaf():
    call = ToolCall(name="f", arguments={"a": list(range(1_000_000))})
    grounding = ground_call(call, normalize_history("1 2 3"), None)
    assert [g.path for g in grounding[:3]] == ["$.a[0]", "$.a[1]", "$.a[2]"] and len(grounding) == 64


# --- 7. output stays proportional to the input ------------------------------------------------


@pytest.mark.slow
def test_findings_repeat_at_most_ten_enum_values_and_a_check_lists_at_most_twenty(tmp_path):
    enum = [f"value-number-{i:05d}-of-the-allowed-set" for i in range(2000)]
    tools = [
        {
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "string", "enum": enum}}},
            },
        }
    ]
    call = {"name": "pick", "arguments": {"items": [str(i % 10) for i in range(850)]}}
    line = json.dumps({"id": "enum", "tools": tools, "call": call})
    for rows in cli_rows(tmp_path, line):
        assert len(json.dumps(rows["enum"])) < 2 * len(line)  # was 68.5 MB for this 86 KB row
        findings = rows["enum"]["results"][0]["static"]["checks"]["allowed_values_violation"]["findings"]
        assert len(findings) == MAX_FINDINGS + 1
        assert findings[0]["expected"] == enum[:MAX_LISTED] and "(and 1990 more)" in findings[0]["message"]
        assert findings[-1]["path"] == "$" and findings[-1]["actual"] == 850 - MAX_FINDINGS
    result = check_call(call, tools)
    assert len(result.checks["allowed_values_violation"].findings) == MAX_FINDINGS + 1


def test_a_correction_lists_at_most_twenty_notes():
    tools = [
        {
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "string", "enum": ["alpha", "beta"]}}},
            },
        }
    ]
    result = check_call({"name": "pick", "arguments": {"items": ["ALPHA"] * 100}}, tools)
    assert result.correction is not None and result.correction.arguments == {"items": ["alpha"] * 100}
    assert len(result.correction_notes) == 21 and result.correction_notes[-1].startswith("and 80 more change")


# --- 14 and 17. limits shown as written; $ref cycles ------------------------------------------


def test_a_limit_beyond_64_bits_is_shown_as_the_spec_wrote_it(tmp_path):
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"minLength": 10**30}}}}]
    line = json.dumps({"id": "limit", "tools": tools, "call": {"name": "f", "arguments": {"a": "x"}}})
    for rows in cli_rows(tmp_path, line):
        finding = rows["limit"]["results"][0]["static"]["checks"]["json_schema_violation"]["findings"][0]
        assert "shorter than 1000000000000000000000000000000 characters" in finding["message"]
        assert finding["expected"] == 10**30 and "18446744073709551615" not in json.dumps(finding)
    result = check_call({"name": "f", "arguments": {"a": "x"}}, tools)
    assert result.checks["json_schema_violation"].findings[0].expected == 10**30


@pytest.mark.parametrize(
    "parameters",
    [
        {
            "type": "object",
            "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}},
            "properties": {"a": {"$ref": "#/$defs/x"}},
        },
        {"$ref": "#"},
        {
            "type": "object",
            "definitions": {"x": {"$ref": "#/definitions/x", "type": "string"}},
            "properties": {"a": {"$ref": "#/definitions/x"}},
        },
    ],
)
def test_a_ref_cycle_is_an_invalid_api_spec(tmp_path, parameters):
    tools = [{"name": "f", "parameters": parameters}]
    line = json.dumps({"id": "cycle", "tools": tools, "call": {"name": "f", "arguments": {"a": 1}}})
    for rows in cli_rows(tmp_path, line):
        messages = failing(rows["cycle"]["results"][0])
        assert list(messages) == ["invalid_api_spec"] and "$ref cycle" in messages["invalid_api_spec"][0]
    assert list(failing(api(check_call({"name": "f", "arguments": {"a": 1}}, tools)))) == ["invalid_api_spec"]


def test_a_recursive_schema_that_consumes_the_value_is_not_a_cycle():
    node = {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}}}
    tools = [
        {
            "name": "f",
            "parameters": {"type": "object", "$defs": {"node": node}, "properties": {"a": {"$ref": "#/$defs/node"}}},
        }
    ]
    assert check_call({"name": "f", "arguments": {"a": {"next": {"next": {"v": 1}}}}}, tools).valid
    bad = check_call({"name": "f", "arguments": {"a": {"next": {"v": "x"}}}}, tools)
    assert list(failing(api(bad))) == ["incorrect_parameter_type"]


def test_hand_built_messages_and_specs_that_cannot_be_sent_on_are_skipped_with_a_warning():
    deep_call = ToolCall(name="f", arguments={"a": nested(5000)})
    history = History(
        messages=(
            Message(role="user", content="x \ud800"),
            Message(role="assistant", tool_calls=(deep_call,)),
            Message(role="user", content="a is 1"),
        )
    )
    tools = [
        ToolSpec(name="f", parameters={"type": "object", "properties": {"a": {}}}),
        ToolSpec(name="g", description="\udfff"),
    ]
    result = api(reflect_sync({"name": "f", "arguments": {"a": 1}}, tools, history))
    assert result["overall_valid"] is True
    assert [w.split(":")[0] for w in result["warnings"]] == [
        "ignored a tool spec",
        "history message #0 was skipped",
        "history message #1 was skipped",
    ]
    assert [s["message_index"] for s in result["grounding"][0]["sources"]] == [0]
    assert list(failing(api(reflect_sync({"name": "g", "arguments": {}}, tools)))) == ["invalid_api_spec"]


@pytest.mark.parametrize("properties", ["true", "1", '"x"', '["a"]'])
def test_a_spec_whose_properties_is_not_an_object_is_an_invalid_api_spec_not_a_crash(tmp_path, properties):
    # Grounding walks the spec for defaults and enum members: a truthy non-object `properties`
    # raised AttributeError there, and the whole `reflection check` run died with no row written.
    tools = '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": %s}}}]'
    line = (
        '{"id": "odd", "tools": %s, "call": {"name": "f", "arguments": {"x": 1}}, "history": [{"role": "user", "content": "x is 1"}]}'
        % (tools % properties)
    )
    for rows in cli_rows(tmp_path, line):
        assert list(failing(rows["odd"]["results"][0])) == ["invalid_api_spec"]
        assert rows["odd"]["overall_valid"] is False
    spec = json.loads(tools % properties)
    history = [{"role": "user", "content": "x is 1"}]
    result = reflect_sync({"name": "f", "arguments": {"x": 1}}, spec, history)
    assert list(failing(api(result))) == ["invalid_api_spec"] and result.overall_valid is False
