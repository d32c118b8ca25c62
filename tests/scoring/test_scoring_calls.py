"""Call-level metrics: worked examples from their public descriptions, then properties."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection.model import ToolCall
from reflection.scoring import binary_tool_call, staged_tool_call, tool_call_equivalence

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "units": {"type": "string", "default": "celsius"},
                    "days": {"type": "number"},
                },
                "required": ["city"],
            },
        },
    }
]
REFERENCE = {"name": "get_weather", "arguments": {"city": "Paris", "units": "celsius"}}


# --- staged_tool_call: the four stages -------------------------------------------------------


def test_staged_invalid_json_scores_0():
    assert staged_tool_call('{"name": "get_weather", "arguments": {"city": ', REFERENCE) == 0.0


def test_staged_unparseable_arguments_string_scores_0():
    prediction = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}
    assert staged_tool_call(prediction, REFERENCE) == 0.0


def test_staged_valid_json_wrong_function_scores_a_quarter():
    assert staged_tool_call('{"name": "web_search", "arguments": {"q": "Paris"}}', REFERENCE) == 0.25


def test_staged_right_function_wrong_keys_scores_a_half():
    assert staged_tool_call({"name": "get_weather", "arguments": {"city": "Paris"}}, REFERENCE) == 0.5


def test_staged_right_keys_wrong_value_scores_three_quarters():
    assert (
        staged_tool_call({"name": "get_weather", "arguments": {"city": "Lyon", "units": "celsius"}}, REFERENCE) == 0.75
    )


def test_staged_exact_match_scores_1_with_arguments_as_a_string_in_any_key_order():
    prediction = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"units": "celsius", "city": "Paris"}'},
    }
    assert staged_tool_call(prediction, REFERENCE) == 1.0


def test_staged_no_prediction_scores_0():
    assert staged_tool_call(None, REFERENCE) == 0.0
    assert staged_tool_call([], REFERENCE) == 0.0


# --- binary_tool_call ------------------------------------------------------------------------


def test_binary_ignores_key_order():
    assert (
        binary_tool_call({"name": "get_weather", "arguments": {"units": "celsius", "city": "Paris"}}, REFERENCE) == 1.0
    )


def test_binary_applies_no_defaults():
    assert binary_tool_call({"name": "get_weather", "arguments": {"city": "Paris"}}, REFERENCE) == 0.0


def test_binary_distinguishes_integer_from_float_and_boolean_from_integer():
    assert binary_tool_call({"name": "f", "arguments": {"n": 1.0}}, {"name": "f", "arguments": {"n": 1}}) == 0.0
    assert binary_tool_call({"name": "f", "arguments": {"n": True}}, {"name": "f", "arguments": {"n": 1}}) == 0.0


def test_binary_reads_anthropic_tool_use():
    prediction = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris", "units": "celsius"}}
    assert binary_tool_call(prediction, REFERENCE) == 1.0


# --- tool_call_equivalence -------------------------------------------------------------------


def test_equivalence_counts_an_unset_parameter_as_its_default():
    assert tool_call_equivalence({"name": "get_weather", "arguments": '{"city": "Paris"}'}, REFERENCE, WEATHER) == 1.0


def test_equivalence_applies_defaults_on_both_sides():
    prediction = {"name": "get_weather", "arguments": {"city": "Paris", "units": "celsius"}}
    assert tool_call_equivalence(prediction, {"name": "get_weather", "arguments": {"city": "Paris"}}, WEATHER) == 1.0


def test_equivalence_without_tools_has_no_defaults():
    assert tool_call_equivalence({"name": "get_weather", "arguments": {"city": "Paris"}}, REFERENCE) == 0.0


def test_equivalence_compares_numbers_by_value():
    reference = {"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}
    assert (
        tool_call_equivalence(
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 1.0}}', reference, WEATHER
        )
        == 1.0
    )


def test_equivalence_does_not_count_true_as_1():
    assert tool_call_equivalence({"name": "f", "arguments": {"x": True}}, {"name": "f", "arguments": {"x": 1}}) == 0.0


def test_equivalence_needs_the_same_function():
    assert tool_call_equivalence({"name": "get_forecast", "arguments": {"city": "Paris"}}, REFERENCE, WEATHER) == 0.0


def test_equivalence_scores_unreadable_arguments_0():
    assert tool_call_equivalence({"name": "get_weather", "arguments": "{oops"}, REFERENCE, WEATHER) == 0.0


def test_an_unreadable_reference_is_a_dataset_error():
    with pytest.raises(ValueError, match="reference"):
        tool_call_equivalence(REFERENCE, {"name": "get_weather", "arguments": "{oops"})


def test_tool_call_objects_are_accepted():
    call = ToolCall(name="get_weather", arguments={"city": "Paris", "units": "celsius"})
    assert binary_tool_call(call, REFERENCE) == staged_tool_call(call, REFERENCE) == 1.0


# --- properties ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
names = st.sampled_from(["get_weather", "search", "f"])
calls = st.builds(lambda n, a: {"name": n, "arguments": a}, names, arguments)
predictions = (
    calls
    | calls.map(
        lambda c: {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
    )
    | json_values
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(prediction=predictions, reference=calls)
def test_every_call_score_is_in_0_1(prediction, reference):
    for metric in (binary_tool_call, staged_tool_call):
        assert 0.0 <= metric(prediction, reference) <= 1.0
    assert 0.0 <= tool_call_equivalence(prediction, reference, WEATHER) <= 1.0


@settings(max_examples=150, deadline=None)
@given(call=calls)
def test_identical_calls_score_1(call):
    as_text = {"type": "function", "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
    for prediction in (call, as_text):
        assert binary_tool_call(prediction, call) == 1.0
        assert staged_tool_call(prediction, call) == 1.0
        assert tool_call_equivalence(prediction, call, WEATHER) == 1.0


@settings(max_examples=100, deadline=None)
@given(call=calls, data=st.data())
def test_key_order_never_matters(call, data):
    keys = data.draw(st.permutations(list(call["arguments"])))
    shuffled = {"name": call["name"], "arguments": {k: call["arguments"][k] for k in keys}}
    assert binary_tool_call(shuffled, call) == staged_tool_call(shuffled, call) == 1.0
