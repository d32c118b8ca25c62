"""The static stage: each of the nine checks, spec and call formats, drafts, refs and formats."""

from __future__ import annotations

import json

import pytest

from reflection import static
from reflection.model import (
    STATIC_CHECKS,
    StaticResult,
    ToolCall,
    ToolInventory,
    ToolSpec,
)
from reflection._lru import LRU
from reflection.static import check_call, check_calls, set_cache_size

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["city"],
}


def tools_with(schema: dict, name: str = "get_weather") -> list[dict]:
    return [{"type": "function", "function": {"name": name, "description": "d", "parameters": schema}}]


def call(args: dict | str, name: str = "get_weather") -> dict:
    return {"name": name, "arguments": args}


def failing(result: StaticResult) -> list[str]:
    return [name for name in STATIC_CHECKS if not result.checks[name].passed]


def only(result: StaticResult, check: str):
    """The single finding of the single failing check `check`."""
    assert failing(result) == [check], result.findings()
    (finding,) = result.checks[check].findings
    return finding


# --- the result shape ------------------------------------------------------------------------


def test_valid_call_passes_all_nine_checks_in_order():
    result = check_call(call({"city": "Paris", "unit": "celsius"}), tools_with(WEATHER))
    assert list(result.checks) == list(STATIC_CHECKS)
    assert result.valid is True
    assert result.findings() == []
    assert result.correction is None and result.warnings == ()


def test_result_round_trips_as_json():
    result = check_call(call({"city": 5}), tools_with(WEATHER))
    data = json.loads(result.model_dump_json())
    assert data["valid"] is False
    assert data["checks"]["incorrect_parameter_type"]["findings"][0]["path"] == "$.city"


# --- non_existent_function -------------------------------------------------------------------


def test_unknown_function_fails_non_existent_function_and_skips_arguments():
    result = check_call(call({"nope": 1}, name="book_flight"), tools_with(WEATHER))
    finding = only(result, "non_existent_function")
    assert finding.path == "$"
    assert finding.expected == ["get_weather"] and finding.actual == "book_flight"
    assert "Arguments not checked" in finding.message and "get_weather" in finding.message


def test_unknown_function_message_names_the_one_close_tool():
    finding = only(check_call(call({}, name="get_wether"), tools_with(WEATHER)), "non_existent_function")
    assert 'Did you mean "get_weather"?' in finding.message


# --- non_existent_parameter ------------------------------------------------------------------


def test_unknown_top_level_argument_is_non_existent_parameter_without_additional_properties_false():
    finding = only(check_call(call({"city": "Paris", "town": "Lyon"}), tools_with(WEATHER)), "non_existent_parameter")
    assert finding.path == "$.town"
    assert finding.actual == "town"
    assert finding.expected == ["city", "unit", "days"]
    assert "Remove it" in finding.message


def test_unknown_argument_with_additional_properties_false_is_reported_once():
    schema = dict(WEATHER, additionalProperties=False)
    result = check_call(call({"city": "Paris", "town": "Lyon"}), tools_with(schema))
    finding = only(result, "non_existent_parameter")
    assert finding.path == "$.town" and finding.keyword == "additionalProperties"


def test_argument_to_tool_without_parameters_is_non_existent_parameter():
    tools = [{"name": "ping", "description": "no parameters"}]
    finding = only(check_call(call({"x": 1}, name="ping"), tools), "non_existent_parameter")
    assert "takes no parameters" in finding.message


def test_unknown_key_in_nested_object_is_allowed_when_the_schema_does_not_forbid_it():
    schema = {"type": "object", "properties": {"filter": {"type": "object", "properties": {"a": {}}}}}
    assert check_call(call({"filter": {"b": 1}}, name="t"), tools_with(schema, "t")).valid


def test_unknown_key_in_nested_object_with_additional_properties_false_is_non_existent_parameter():
    schema = {
        "type": "object",
        "properties": {"filter": {"type": "object", "properties": {"a": {}}, "additionalProperties": False}},
    }
    finding = only(
        check_call(call({"filter": {"a": 1, "b": 2}}, name="t"), tools_with(schema, "t")), "non_existent_parameter"
    )
    assert finding.path == "$.filter.b" and finding.expected == ["a"] and finding.actual == "b"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "$ref": "#/$defs/base", "$defs": {"base": {"properties": {"x": {}}}}},
        {"type": "object", "allOf": [{"properties": {"x": {}}}]},
        {"type": "object", "anyOf": [{"properties": {"x": {}}}, {"properties": {"y": {}}}]},
        {"type": "object", "oneOf": [{"properties": {"x": {}}}]},
        {"type": "object", "if": {"properties": {"k": {}}}, "then": {"properties": {"x": {}}}},
        {"type": "object", "properties": {"k": {}}, "dependentSchemas": {"k": {"properties": {"x": {}}}}},
        {"type": "object", "patternProperties": {"^x": {}}},
    ],
    ids=["ref", "allOf", "anyOf", "oneOf", "if-then", "dependentSchemas", "patternProperties"],
)
def test_names_defined_through_subschemas_are_not_unknown(schema):
    result = check_call(call({"x": 1}, name="t"), tools_with(schema, "t"))
    assert result.checks["non_existent_parameter"].passed, result.findings()


@pytest.mark.parametrize("extra", [True, {}, {"type": "integer"}])
def test_truthy_additional_properties_defines_every_name(extra):
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": extra}
    assert check_call(call({"zzz": 3}, name="t"), tools_with(schema, "t")).valid


def test_unevaluated_properties_is_json_schema_violation_for_defined_but_unevaluated_names():
    schema = {
        "type": "object",
        "unevaluatedProperties": False,
        "anyOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "string"}}}],
    }
    # "b" is defined (in a branch) but the branch that evaluates it fails, so it stays unevaluated.
    finding = only(check_call(call({"a": 1, "b": 2}, name="t"), tools_with(schema, "t")), "json_schema_violation")
    assert finding.path == "$.b" and finding.keyword == "unevaluatedProperties"


def test_unknown_name_also_unevaluated_is_counted_once_as_non_existent_parameter():
    schema = {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}
    result = check_call(call({"a": 1, "zzz": 2}, name="t"), tools_with(schema, "t"))
    assert failing(result) == ["non_existent_parameter"]
    assert [f.path for f in result.findings()] == ["$.zzz"]


# --- incorrect_parameter_type ----------------------------------------------------------------


def test_wrong_type_is_incorrect_parameter_type_with_expected_and_actual():
    finding = only(check_call(call({"city": "Paris", "days": "3"}), tools_with(WEATHER)), "incorrect_parameter_type")
    assert (finding.path, finding.expected, finding.actual, finding.keyword) == ("$.days", "integer", "string", "type")
    assert "expected integer, got string" in finding.message


def test_wrong_type_inside_array_items_has_indexed_path():
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer"}}}}
        },
    }
    result = check_call(call({"items": [{"qty": 1}, {"qty": "2"}]}, name="t"), tools_with(schema, "t"))
    assert only(result, "incorrect_parameter_type").path == "$.items[1].qty"


def test_nullable_union_given_wrong_type_is_incorrect_parameter_type():
    schema = {"type": "object", "properties": {"age": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    finding = only(check_call(call({"age": "ten"}, name="t"), tools_with(schema, "t")), "incorrect_parameter_type")
    assert finding.expected == ["integer", "null"] and finding.keyword == "anyOf"


def test_union_with_one_branch_of_the_right_type_reports_that_branch():
    schema = {
        "type": "object",
        "properties": {
            "opt": {
                "anyOf": [
                    {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                    {"type": "null"},
                ]
            }
        },
    }
    finding = only(check_call(call({"opt": {}}, name="t"), tools_with(schema, "t")), "missing_required_parameter")
    assert finding.path == "$.opt.x"


def test_one_of_branch_of_the_right_type_reports_its_enum_violation():
    schema = {
        "type": "object",
        "properties": {"mode": {"oneOf": [{"type": "string", "enum": ["fast", "slow"]}, {"type": "integer"}]}},
    }
    finding = only(check_call(call({"mode": "medium"}, name="t"), tools_with(schema, "t")), "allowed_values_violation")
    assert finding.expected == ["fast", "slow"]


def test_union_failing_several_same_type_branches_is_json_schema_violation():
    schema = {
        "type": "object",
        "properties": {
            "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}
        },
    }
    finding = only(check_call(call({"when": "soon"}, name="t"), tools_with(schema, "t")), "json_schema_violation")
    assert finding.keyword == "anyOf" and finding.path == "$.when"


def test_wrong_type_does_not_also_count_as_enum_violation():
    result = check_call(call({"city": "Paris", "unit": 3}), tools_with(WEATHER))
    assert only(result, "incorrect_parameter_type").path == "$.unit"


def test_integer_valued_float_is_an_integer():
    assert check_call(call({"city": "Paris", "days": 3.0}), tools_with(WEATHER)).valid


def test_big_integer_argument_is_checked_exactly():
    finding = only(check_call(call({"city": "Paris", "days": 2**70}), tools_with(WEATHER)), "json_schema_violation")
    assert finding.keyword == "maximum" and finding.actual == 2**70


# --- missing_required_parameter --------------------------------------------------------------


def test_missing_required_parameter_points_at_the_missing_name():
    finding = only(check_call(call({"unit": "celsius"}), tools_with(WEATHER)), "missing_required_parameter")
    assert (finding.path, finding.expected, finding.keyword) == ("$.city", "city", "required")
    assert "(expected string)" in finding.message


def test_missing_required_in_nested_array_item():
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"sku": {}, "qty": {}}, "required": ["sku", "qty"]},
            }
        },
    }
    result = check_call(call({"items": [{"sku": "a", "qty": 1}, {"sku": "b"}]}, name="t"), tools_with(schema, "t"))
    assert only(result, "missing_required_parameter").path == "$.items[1].qty"


def test_dependent_required_is_missing_required_parameter():
    schema = {"type": "object", "properties": {"card": {}, "cvv": {}}, "dependentRequired": {"card": ["cvv"]}}
    finding = only(check_call(call({"card": "4111"}, name="t"), tools_with(schema, "t")), "missing_required_parameter")
    assert finding.path == "$.cvv" and finding.keyword == "dependentRequired"


def test_required_twice_in_all_of_is_reported_once():
    schema = {"type": "object", "properties": {"x": {}}, "allOf": [{"required": ["x"]}, {"required": ["x"]}]}
    result = check_call(call({}, name="t"), tools_with(schema, "t"))
    assert [f.path for f in result.findings()] == ["$.x"]


# --- allowed_values_violation ----------------------------------------------------------------


def test_enum_violation_lists_the_allowed_values():
    finding = only(
        check_call(call({"city": "Paris", "unit": "kelvin"}), tools_with(WEATHER)), "allowed_values_violation"
    )
    assert (finding.path, finding.expected, finding.actual, finding.keyword) == (
        "$.unit",
        ["celsius", "fahrenheit"],
        "kelvin",
        "enum",
    )
    assert '"celsius", "fahrenheit"' in finding.message


def test_const_violation():
    schema = {"type": "object", "properties": {"version": {"const": 2}}}
    finding = only(check_call(call({"version": 3}, name="t"), tools_with(schema, "t")), "allowed_values_violation")
    assert (finding.expected, finding.actual, finding.keyword) == (2, 3, "const")


# --- json_schema_violation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sub", "value", "keyword", "expected"),
    [
        ({"type": "integer", "minimum": 1}, 0, "minimum", 1),
        ({"type": "string", "pattern": "^[A-Z]{3}$"}, "lhr", "pattern", "^[A-Z]{3}$"),
        ({"type": "string", "maxLength": 3}, "abcd", "maxLength", 3),
        ({"type": "array", "minItems": 2}, [1], "minItems", 2),
        ({"type": "array", "uniqueItems": True}, [1, 1], "uniqueItems", None),
        ({"type": "number", "multipleOf": 5}, 7, "multipleOf", 5),
        ({"not": {"type": "string"}}, "x", "not", {"type": "string"}),
    ],
)
def test_other_keywords_are_json_schema_violation(sub, value, keyword, expected):
    schema = {"type": "object", "properties": {"v": sub}}
    finding = only(check_call(call({"v": value}, name="t"), tools_with(schema, "t")), "json_schema_violation")
    assert (finding.path, finding.keyword, finding.actual) == ("$.v", keyword, value)
    if expected is not None:
        assert finding.expected == expected


def test_path_quotes_keys_that_are_not_identifiers():
    schema = {"type": "object", "properties": {"my key": {"type": "integer"}}}
    assert (
        only(check_call(call({"my key": "x"}, name="t"), tools_with(schema, "t")), "incorrect_parameter_type").path
        == "$['my key']"
    )


# --- drafts and refs -------------------------------------------------------------------------


def test_draft7_array_items_is_tuple_validation():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}},
    }
    result = check_call(call({"pair": [1, 2]}, name="t"), tools_with(schema, "t"))
    assert only(result, "incorrect_parameter_type").path == "$.pair[1]"


def test_array_items_without_schema_is_read_as_draft7_tuple_validation():
    schema = {
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}},
    }
    assert check_call(call({"pair": [1, "a"]}, name="t"), tools_with(schema, "t")).valid
    result = check_call(call({"pair": [1, 2]}, name="t"), tools_with(schema, "t"))
    assert only(result, "incorrect_parameter_type").path == "$.pair[1]"


@pytest.mark.parametrize(
    "form",
    [
        {"additionalItems": False},
        {"dependencies": {"a": ["b"]}},
        {"definitions": {"n": {"type": "integer"}}},
    ],
    ids=["additionalItems", "dependencies", "definitions"],
)
def test_a_spec_without_schema_using_a_draft7_only_form_is_read_as_draft7(form):
    # Draft 7 ignores the siblings of a $ref, 2020-12 applies them: the `maximum` tells which is read.
    schema = {
        "type": "object",
        "properties": {
            "n": {"$ref": "#/properties/m", "maximum": 1},
            "m": {"type": "integer"},
            "extra": {"type": "object", **form},
        },
    }
    assert check_call(call({"n": 5}, name="t"), tools_with(schema, "t")).valid
    with_2020_form = {**schema, "$defs": {}}
    assert (
        only(check_call(call({"n": 5}, name="t"), tools_with(with_2020_form, "t")), "json_schema_violation").keyword
        == "maximum"
    )


def test_array_items_beside_a_2020_12_only_form_stays_an_invalid_spec():
    schema = {
        "type": "object",
        "properties": {
            "pair": {"type": "array", "items": [{"type": "integer"}]},
            "rest": {"type": "array", "prefixItems": [{"type": "integer"}]},
        },
    }
    finding = only(check_call(call({"pair": [1]}, name="t"), tools_with(schema, "t")), "invalid_api_spec")
    assert "not a valid JSON Schema" in finding.message and "Arguments not checked" in finding.message


def test_a_declared_schema_decides_the_draft():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "integer"}]}},
    }
    assert failing(check_call(call({"pair": [1]}, name="t"), tools_with(schema, "t"))) == ["invalid_api_spec"]


def test_format_stays_an_assertion_in_a_spec_read_as_draft7():
    schema = {
        "type": "object",
        "properties": {"d": {"type": "string", "format": "date"}},
        "definitions": {"unused": {}},
    }
    assert (
        only(check_call(call({"d": "2024-13-01"}, name="t"), tools_with(schema, "t")), "json_schema_violation").keyword
        == "format"
    )


def test_prefix_items_in_2020_12():
    schema = {
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}},
    }
    result = check_call(call({"pair": [1, 2]}, name="t"), tools_with(schema, "t"))
    finding = only(result, "incorrect_parameter_type")
    assert finding.path == "$.pair[1]" and finding.expected == "string"


def test_defs_ref_is_followed():
    schema = {
        "type": "object",
        "properties": {"at": {"$ref": "#/$defs/point"}},
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
    }
    assert (
        only(check_call(call({"at": {}}, name="t"), tools_with(schema, "t")), "missing_required_parameter").path
        == "$.at.x"
    )


def test_draft7_definitions_ref_is_followed():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"n": {"$ref": "#/definitions/count"}},
        "definitions": {"count": {"type": "integer", "minimum": 0}},
    }
    finding = only(check_call(call({"n": -1}, name="t"), tools_with(schema, "t")), "json_schema_violation")
    assert finding.keyword == "minimum"


def test_remote_ref_is_not_fetched_and_is_invalid_api_spec():
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/schemas/a.json"}}}
    finding = only(check_call(call({"a": 1}, name="t"), tools_with(schema, "t")), "invalid_api_spec")
    assert finding.keyword == "$ref"
    assert "remote refs are never fetched" in finding.message and "$defs" in finding.message


def test_unresolvable_local_ref_is_invalid_api_spec():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    assert (
        "not a valid JSON Schema"
        in only(check_call(call({}, name="t"), tools_with(schema, "t")), "invalid_api_spec").message
    )


def test_unknown_meta_schema_is_invalid_api_spec():
    schema = {"$schema": "https://example.com/my-meta", "type": "object"}
    assert only(check_call(call({}, name="t"), tools_with(schema, "t")), "invalid_api_spec")


# --- formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date", "2024-02-29", "2024-02-30"),
        ("date-time", "2024-01-01T12:00:00Z", "2024-01-01 noon"),
        ("time", "12:00:00Z", "25:00:00Z"),
        ("email", "ana@example.com", "not an email"),
        ("uri", "https://example.com/a?b=c", "no scheme here"),
        ("uuid", "6f1c2a9e-8d4b-4c3a-9e2f-1a2b3c4d5e6f", "6f1c2a9e-8d4b"),
        ("ipv4", "192.168.0.1", "192.168.0.256"),
        ("ipv6", "2001:db8::1", "2001:db8:::1"),
    ],
)
def test_format_is_asserted(fmt, good, bad):
    tools = tools_with({"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}, "t")
    assert check_call(call({"v": good}, name="t"), tools).valid
    finding = only(check_call(call({"v": bad}, name="t"), tools), "json_schema_violation")
    assert (finding.keyword, finding.expected, finding.actual) == ("format", fmt, bad)


# --- gating checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("tools", [None, [], {}])
def test_no_specs_is_empty_api_spec(tools):
    finding = only(check_call(call({"city": "Paris"}), tools), "empty_api_spec")
    assert "Arguments not checked" in finding.message


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"city": "Paris"', "not valid JSON"),
        ('{"city": "Paris"} trailing', "not valid JSON"),
        ('{"days": NaN}', "not valid JSON"),
        ('{"days": Infinity}', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (7, "must be a JSON object"),
    ],
)
def test_unreadable_arguments_are_invalid_tool_call(arguments, fragment):
    finding = only(check_call(call(arguments), tools_with(WEATHER)), "invalid_tool_call")
    assert fragment in finding.message and "Arguments not checked" in finding.message


def test_call_without_name_is_invalid_tool_call():
    assert "no function name" in only(check_call({"arguments": {}}, tools_with(WEATHER)), "invalid_tool_call").message


def test_call_that_is_not_an_object_is_invalid_tool_call():
    assert only(check_call(42, tools_with(WEATHER)), "invalid_tool_call")


def test_empty_string_arguments_are_an_empty_object():
    schema = {"type": "object", "properties": {}}
    assert check_call(call("", name="ping"), tools_with(schema, "ping")).valid


def test_hand_built_tool_call_with_nan_is_invalid_tool_call():
    bad = ToolCall(name="get_weather", arguments={"city": "Paris", "days": float("nan")})
    assert "NaN" in only(check_call(bad, tools_with(WEATHER)), "invalid_tool_call").message


def test_hand_built_tool_call_without_name_is_invalid_tool_call():
    assert "no function name" in only(check_call(ToolCall(name=" "), tools_with(WEATHER)), "invalid_tool_call").message


def test_unpaired_surrogate_in_argument_name_is_invalid_tool_call():
    result = check_call(call({"city": "Paris", "\ud800": 1}), tools_with(dict(WEATHER, additionalProperties=True)))
    assert failing(result) == ["invalid_tool_call"]


def test_called_tool_with_unreadable_spec_is_invalid_api_spec():
    tools = [{"name": "get_weather", "parameters": "not a schema"}]
    finding = only(check_call(call({"city": "Paris"}), tools), "invalid_api_spec")
    assert "get_weather" in finding.message and "Arguments not checked" in finding.message


def test_called_tool_that_may_be_an_unreadable_spec_is_invalid_api_spec():
    tools = [{"type": "function", "function": {"description": "no name"}}, tools_with(WEATHER)[0]]
    finding = only(check_call(call({}, name="book_flight"), tools), "invalid_api_spec")
    assert "may be one of them" in finding.message


def test_broken_spec_of_another_tool_is_only_a_warning():
    tools = tools_with(WEATHER) + [
        {"description": "no name"},
        {"name": "broken", "parameters": {"type": "object", "properties": {"a": {"type": 7}}}},
    ]
    result = check_call(call({"city": "Paris"}), tools)
    assert result.valid
    assert len(result.warnings) == 2
    assert "tool spec #1 has no name" in result.warnings[0] and "'broken'" in result.warnings[1]


def test_several_calls_given_to_check_call_is_invalid_tool_call():
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": 1}'}},
        ],
    }
    assert "use check_calls" in only(check_call(message, tools_with(WEATHER)), "invalid_tool_call").message


# --- parallel calls --------------------------------------------------------------------------


def test_parallel_calls_are_reported_per_call():
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": '{"days": 3}'}},
            {"id": "c", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        ],
    }
    results = check_calls(message, tools_with(WEATHER))
    assert [r.call.id for r in results] == ["a", "b", "c"]
    assert [failing(r) for r in results] == [[], ["missing_required_parameter"], ["non_existent_function"]]


def test_check_calls_accepts_tool_call_objects():
    calls = [ToolCall(name="get_weather", arguments={"city": "Paris"}), ToolCall(name="get_weather", arguments={})]
    assert [r.valid for r in check_calls(calls, tools_with(WEATHER))] == [True, False]


# --- spec and call formats -------------------------------------------------------------------

BFCL = {
    "name": "calc",
    "description": "d",
    "parameters": {
        "type": "dict",
        "properties": {
            "x": {"type": "float"},
            "pair": {"type": "tuple", "items": {"type": "integer"}},
            "anything": {"type": "any"},
        },
        "required": ["x"],
    },
}


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
        {"name": "get_weather", "description": "bare", "parameters": WEATHER},
        {"name": "get_weather", "description": "anthropic", "input_schema": WEATHER},
        {"name": "get_weather", "description": "mcp", "inputSchema": WEATHER},
        {
            "name": "get_weather",
            "parameters": [
                {"name": "city", "type": "string", "required": True},
                {"name": "unit", "type": "string", "enum": ["celsius", "fahrenheit"]},
                {"name": "days", "type": "integer", "minimum": 1, "maximum": 14},
            ],
        },
    ],
    ids=["openai", "bare", "anthropic", "mcp", "parameter_list"],
)
def test_spec_formats_end_to_end(spec):
    assert check_call(call({"city": "Paris", "days": 3}), [spec]).valid
    assert failing(check_call(call({"days": "3"}), [spec])) == [
        "incorrect_parameter_type",
        "missing_required_parameter",
    ]
    assert failing(check_call(call({"city": "Paris", "unit": "K"}), [spec])) == ["allowed_values_violation"]


def test_bfcl_type_names_end_to_end():
    assert check_call(call({"x": 1.5, "pair": [1, 2], "anything": {"k": None}}, name="calc"), [BFCL]).valid
    result = check_call(call({"x": "1.5", "pair": "1,2"}, name="calc"), [BFCL])
    assert [f.path for f in result.checks["incorrect_parameter_type"].findings] == ["$.x", "$.pair"]


@pytest.mark.parametrize(
    "raw",
    [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        ToolCall(name="get_weather", arguments={"city": "Paris"}),
    ],
    ids=["openai", "anthropic", "plain", "json-text", "ToolCall"],
)
def test_call_shapes_end_to_end(raw):
    assert check_call(raw, tools_with(WEATHER)).valid


def test_tool_inventory_is_accepted_as_tools():
    inventory = ToolInventory(tools=(ToolSpec(name="get_weather", parameters=WEATHER),))
    assert check_call(call({"city": "Paris"}), inventory).valid


# --- misuse ----------------------------------------------------------------------------------


def test_non_json_call_raises_type_error_naming_call():
    with pytest.raises(TypeError, match="^call:"):
        check_call({"name": "get_weather", "arguments": {"city": object()}}, tools_with(WEATHER))


def test_non_json_tools_raise_type_error_naming_tools():
    with pytest.raises(TypeError, match="^tools:"):
        check_call(call({}), [{"name": "x", "parameters": {1, 2}}])


def test_non_json_calls_raise_type_error_naming_calls():
    with pytest.raises(TypeError, match="^calls:"):
        check_calls([{"name": "get_weather", "arguments": {"when": object()}}], tools_with(WEATHER))


def test_tool_list_with_a_uuid_raises_even_after_the_same_json_was_seen():
    import uuid

    value = uuid.uuid4()
    tools = [{"name": "t", "description": str(value)}]
    check_call(call({}, name="t"), tools)
    with pytest.raises(TypeError, match="^tools:"):
        check_call(call({}, name="t"), [{"name": "t", "description": value}])


# --- caching ---------------------------------------------------------------------------------


@pytest.mark.patches_module("reflection.static")
def test_each_distinct_schema_is_compiled_once(monkeypatch):
    compiled = []
    original = static._compile
    monkeypatch.setattr(
        static, "_compile", lambda schema, **options: compiled.append(schema) or original(schema, **options)
    )
    schema = {"type": "object", "properties": {"unique_for_this_test": {"type": "integer"}}}
    for value in (1, "x", 2):
        check_call(call({"unique_for_this_test": value}, name="t"), tools_with(schema, "t"))
    reordered = dict(reversed(list(schema.items())))  # same content, other key order
    check_call(call({}, name="t2"), tools_with(reordered, "t2"))
    assert compiled == [schema]


def test_schema_cache_stays_bounded_on_ever_new_schemas(monkeypatch):
    monkeypatch.setattr(static._SCHEMAS, "size", 50)
    for i in range(200):
        schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"}}}
        assert check_call(call({f"p{i}": i}, name="t"), tools_with(schema, "t")).valid
    assert len(static._SCHEMAS) <= 50


@pytest.mark.patches_module("reflection.static")
def test_schema_cache_keeps_the_schemas_in_use_and_evicts_the_stalest(monkeypatch):
    monkeypatch.setattr(static, "_SCHEMAS", LRU(4))
    compiled = []
    real = static._compile
    monkeypatch.setattr(
        static, "_compile", lambda schema, **options: compiled.append(schema) or real(schema, **options)
    )
    hot = {"type": "object", "properties": {"hot": {"type": "integer"}}}
    for i in range(12):  # the hot schema between ever-new ones: it must never be compiled again
        check_call(call({"hot": 1}, name="h"), tools_with(hot, "h"))
        cold = {"type": "object", "properties": {f"c{i}": {"type": "integer"}}}
        check_call(call({}, name="c"), tools_with(cold, "c"))
    assert compiled.count(hot) == 1
    assert len(static._SCHEMAS) == 4


def test_set_cache_size_resizes_every_static_cache():
    before = static._SCHEMAS.size
    try:
        set_cache_size(3)
        assert static._SCHEMAS.size == static._PREPARED.size == 3
        assert len(static._SCHEMAS) <= 3
        with pytest.raises(ValueError, match="at least 1"):
            set_cache_size(0)
    finally:
        set_cache_size(before)


def test_type_list_with_unhashable_items_is_invalid_api_spec():
    # Found by the never-crashes property: formats used to raise TypeError here.
    assert only(check_call(call({}, name="t"), tools_with({"type": [[]]}, "t")), "invalid_api_spec")


def test_schema_with_nan_is_invalid_api_spec():
    schema = {"type": "object", "properties": {"v": {"const": float("nan")}}}
    assert "NaN" in only(check_call(call({"v": None}, name="t"), tools_with(schema, "t")), "invalid_api_spec").message


def test_a_null_where_a_type_is_expected_reads_once():
    result = check_call(
        {"name": "f", "arguments": {"a": None}},
        [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}],
    )
    assert result.checks["incorrect_parameter_type"].findings[0].message == (
        "$.a: expected integer, got null. Send a value of type integer."
    )
