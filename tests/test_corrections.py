"""Corrections: machine fixes offered only when the patched call passes the same checker."""

from __future__ import annotations

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from reflection._corrections import _loose_matches, _loosely_equal, closest_name
from reflection.model import ToolCall
from reflection.static import check_call

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "zip": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "ratio": {"type": "number"},
        "metric": {"type": "boolean"},
        "unit": {"type": "string", "enum": ["Celsius", "Fahrenheit"]},
        "level": {"enum": [1, 2, 3]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "stops": {
            "type": "array",
            "items": {"type": "object", "properties": {"qty": {"type": "integer"}, "label": {"type": "string"}}},
        },
        "age": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    "required": ["city"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "search_hotels", "parameters": SCHEMA}},
]


def corrected(arguments: dict, name: str = "get_weather", tools: list | None = None) -> tuple[ToolCall | None, tuple]:
    result = check_call({"id": "call_1", "name": name, "arguments": arguments}, tools or TOOLS)
    assert not result.valid
    if result.correction is not None:  # whatever is offered must itself pass
        assert check_call(result.correction, tools or TOOLS).valid
    return result.correction, result.correction_notes


@pytest.mark.parametrize(
    ("given", "fixed"),
    [
        ({"days": "5"}, {"days": 5}),
        ({"days": " 5 "}, {"days": 5}),
        ({"days": "5.0"}, {"days": 5}),
        ({"ratio": "2.5"}, {"ratio": 2.5}),
        ({"ratio": "-3"}, {"ratio": -3}),
        ({"metric": "true"}, {"metric": True}),
        ({"metric": "False"}, {"metric": False}),
        ({"zip": 75001}, {"zip": "75001"}),
        ({"zip": 7.5}, {"zip": "7.5"}),
        ({"zip": True}, {"zip": "true"}),
        ({"age": "40"}, {"age": 40}),
    ],
    ids=lambda v: repr(v),
)
def test_scalar_type_is_coerced(given, fixed):
    correction, notes = corrected({"city": "Paris", **given})
    assert correction is not None and correction.arguments == {"city": "Paris", **fixed}
    assert len(notes) == 1 and "changed" in notes[0]


def test_coercion_at_depth_inside_array_items():
    correction, notes = corrected({"city": "Paris", "stops": [{"qty": 1}, {"qty": "2", "label": 3}]})
    assert correction is not None
    assert correction.arguments["stops"] == [{"qty": 1}, {"qty": 2, "label": "3"}]
    assert sorted(n.split(":")[0] for n in notes) == ["$.stops[1].label", "$.stops[1].qty"]


def test_scalar_is_wrapped_where_an_array_is_expected():
    correction, notes = corrected({"city": "Paris", "tags": "sunny"})
    assert correction is not None and correction.arguments["tags"] == ["sunny"]
    assert notes == ('$.tags: wrapped "sunny" in an array',)


def test_wrapped_scalar_items_are_then_coerced():
    correction, notes = corrected({"city": "Paris", "ids": "7"})
    assert correction is not None and correction.arguments["ids"] == [7]
    assert len(notes) == 2


def test_enum_value_is_matched_ignoring_case():
    correction, notes = corrected({"city": "Paris", "unit": "celsius"})
    assert correction is not None and correction.arguments["unit"] == "Celsius"
    assert notes == ('$.unit: changed "celsius" to the allowed value "Celsius"',)


def test_enum_value_given_as_text_is_matched():
    correction, _ = corrected({"city": "Paris", "level": "2"})
    assert correction is not None and correction.arguments["level"] == 2


def test_ambiguous_enum_match_gets_no_correction():
    schema = {"type": "object", "properties": {"mode": {"enum": ["Fast", "FAST"]}}}
    tools = [{"name": "t", "parameters": schema}]
    assert corrected({"mode": "fast"}, name="t", tools=tools) == (None, ())


def test_unknown_parameter_is_dropped():
    correction, notes = corrected({"city": "Paris", "town": "Lyon"})
    assert correction is not None and correction.arguments == {"city": "Paris"}
    assert notes == ("$.town: removed the unknown parameter",)


def test_function_typo_with_one_close_tool_is_renamed():
    correction, notes = corrected({"city": "Paris"}, name="get_wether")
    assert correction is not None and correction.name == "get_weather" and correction.id == "call_1"
    assert notes == ('renamed function "get_wether" to "get_weather", the only defined tool with a close name',)


def test_function_typo_and_argument_fix_together():
    correction, notes = corrected({"city": "Paris", "days": "3"}, name="Get_Weather")
    assert correction is not None and (correction.name, correction.arguments) == (
        "get_weather",
        {"city": "Paris", "days": 3},
    )
    assert len(notes) == 2


def test_function_name_close_to_two_tools_gets_no_correction():
    tools = [{"name": "get_user", "parameters": SCHEMA}, {"name": "get_users", "parameters": SCHEMA}]
    assert corrected({"city": "Paris"}, name="get_userz", tools=tools) == (None, ())


def test_function_name_close_to_no_tool_gets_no_correction():
    assert corrected({"city": "Paris"}, name="book_flight") == (None, ())


def test_missing_required_parameter_gets_no_correction():
    assert corrected({"days": "3"}) == (None, ())


def test_unconvertible_value_gets_no_correction():
    assert corrected({"city": "Paris", "days": "three"}) == (None, ())


def test_coerced_value_that_still_fails_the_schema_gets_no_correction():
    # "50" -> 50 fixes the type, but 50 breaks maximum 14: never offer an unvalidated patch.
    assert corrected({"city": "Paris", "days": "50"}) == (None, ())


def test_schema_violation_is_not_machine_fixed():
    assert corrected({"city": "Paris", "days": 0}) == (None, ())


def test_valid_call_has_no_correction():
    result = check_call({"name": "get_weather", "arguments": {"city": "Paris"}}, TOOLS)
    assert result.valid and result.correction is None and result.correction_notes == ()


def test_gating_failures_get_no_correction():
    result = check_call({"name": "get_weather", "arguments": "{oops"}, TOOLS)
    assert result.correction is None


def test_original_call_is_left_untouched():
    arguments = {"city": "Paris", "stops": [{"qty": "2"}]}
    check_call({"name": "get_weather", "arguments": arguments}, TOOLS)
    assert arguments == {"city": "Paris", "stops": [{"qty": "2"}]}


def test_closest_name_needs_exactly_one_candidate():
    assert closest_name("serch_hotels", ["get_weather", "search_hotels"]) == "search_hotels"
    assert closest_name("get_userz", ["get_user", "get_users"]) is None
    assert closest_name("weather", ["get_weather"]) is None


_LOOSE_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([1.0, 2.5, -0.0])
    | st.text(alphabet="aAbB 12.tru", max_size=5)
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    value=_LOOSE_SCALARS | st.lists(st.integers(), max_size=1),
    options=st.lists(_LOOSE_SCALARS | st.lists(st.integers(), max_size=1), max_size=8),
)
def test_the_enum_index_finds_exactly_the_loosely_equal_options(value, options):
    options = tuple(options)
    linear = [o for o in options if _loosely_equal(value, o)]
    found = _loose_matches(value, options)
    assert sorted(map(repr, found)) == sorted(map(repr, linear))


def test_a_close_name_is_found_alike_whether_its_pairs_were_met_in_other_lists():
    from reflection._corrections import closest_name

    assert closest_name("get_wether", ["get_weather", "send_email"]) == "get_weather"
    # The same pairs in another company: the answer is the list's own.
    assert closest_name("get_wether", ["send_email", "get_weather", "get_weathers"]) is None
    assert closest_name("get_wether", ["get_weathers", "run_query"]) == "get_weathers"
