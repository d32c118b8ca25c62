"""The dataset evaluator: flags, weights, overall score, bands, and the counted failure cases."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from reflection.scoring import (
    ScoreWeights,
    ToolCallingEvaluator,
    evaluate_tool_calls,
    interpret_score,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                    "units": {"type": "string", "default": "celsius"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]
EXPECTED = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}


def sample(predicted, expected=EXPECTED, **extra):
    return {
        "id": extra.pop("id", "s1"),
        "query": "weather in Paris for 3 days",
        "expected": expected,
        "predicted": predicted,
        **extra,
    }


def record(predicted, **kwargs):
    return ToolCallingEvaluator(TOOLS, **kwargs).score_sample(sample(predicted))


# --- the three flags -------------------------------------------------------------------------


def test_a_correct_call_passes_every_flag():
    r = record({"name": "get_weather", "arguments": '{"days": 3, "city": "Paris"}'})
    assert (r.tool_selection_accuracy, r.parameter_accuracy, r.execution_success, r.error) == (True, True, True, None)


def test_parameter_accuracy_checks_types_not_values_by_default():
    r = record({"name": "get_weather", "arguments": {"city": "Lyon", "days": 5}})
    assert r.parameter_accuracy is True


def test_parameter_accuracy_compares_values_when_asked():
    assert (
        record(
            {"name": "get_weather", "arguments": {"city": "Lyon", "days": 3}}, compare_values=True
        ).parameter_accuracy
        is False
    )
    assert (
        record(
            {"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}, compare_values=True
        ).parameter_accuracy
        is True
    )


def test_parameter_accuracy_fails_on_a_missing_required_parameter():
    assert record({"name": "get_weather", "arguments": {"days": 3}}).parameter_accuracy is False


def test_parameter_accuracy_fails_on_a_wrong_type():
    assert record({"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}).parameter_accuracy is False


def test_parameters_are_checked_against_the_expected_tools_schema():
    # web_search's own schema is satisfied, but the expected tool needed a city.
    r = record({"name": "web_search", "arguments": {"query": "Paris weather"}})
    assert (r.tool_selection_accuracy, r.parameter_accuracy, r.execution_success) == (False, False, False)


def test_execution_success_needs_arguments_that_validate_against_the_schema():
    r = record({"name": "get_weather", "arguments": {"city": "Paris", "days": 30}})  # maximum 7
    assert (r.parameter_accuracy, r.execution_success) == (True, False)
    assert r.error.startswith("arguments are not valid for 'get_weather': $.days")


def test_execution_success_fails_on_a_parameter_the_tool_does_not_declare():
    r = record({"name": "get_weather", "arguments": {"city": "Paris", "country": "FR"}})
    assert (r.parameter_accuracy, r.execution_success) == (True, False)


def test_without_a_schema_the_reference_arguments_are_the_required_ones():
    r = ToolCallingEvaluator().score_sample(sample({"name": "get_weather", "arguments": {"city": "Rome", "days": 2.0}}))
    assert (r.parameter_accuracy, r.execution_success) == (True, True)
    r = ToolCallingEvaluator().score_sample(sample({"name": "get_weather", "arguments": {"city": "Rome"}}))
    assert (r.parameter_accuracy, r.execution_success) == (False, False)


# --- counted, not crashed on -----------------------------------------------------------------


def test_no_call_when_one_was_expected_is_counted():
    report = evaluate_tool_calls([sample([]), sample(None, id="s2")], TOOLS)
    assert report.no_call == 2
    assert report.tool_selection_accuracy == 0.0
    assert "no tool call was made" in report.records[0].error


def test_a_call_to_a_tool_not_in_the_inventory_is_counted():
    report = evaluate_tool_calls([sample({"name": "get_forecast", "arguments": {"city": "Paris"}})], TOOLS)
    assert report.unknown_tool == 1
    assert report.records[0].predicted_tool == "get_forecast"
    assert "not in the inventory" in report.records[0].error


def test_no_call_expected_and_none_made_is_correct():
    r = ToolCallingEvaluator(TOOLS).score_sample(sample({"role": "assistant", "content": "Hello!"}, expected=None))
    assert (r.tool_selection_accuracy, r.parameter_accuracy, r.execution_success) == (True, True, True)


def test_an_unusable_sample_becomes_an_unscored_record():
    report = evaluate_tool_calls(
        [
            sample({"name": "get_weather"}, expected={"name": "get_weather", "arguments": "{bad"}),
            sample({"name": "get_weather", "arguments": {"city": "Paris"}}, id="ok"),
        ],
        TOOLS,
    )
    assert (report.samples, report.scored) == (2, 1)
    assert report.records[0].scored is False and "unusable sample" in report.records[0].error
    assert report.tool_selection_accuracy == 1.0


def test_records_keep_what_is_needed_to_inspect_failures():
    r = evaluate_tool_calls([sample({"name": "web_search", "arguments": {"query": "x"}}, id=7)], TOOLS).records[0]
    assert (r.sample_id, r.query, r.expected_tool, r.predicted_tool) == (
        "7",
        "weather in Paris for 3 days",
        "get_weather",
        "web_search",
    )


# --- overall score and bands -----------------------------------------------------------------


def test_overall_is_the_weighted_sum_with_defaults_40_35_25():
    # selection 1.0, parameters 1.0 (types only), execution 0.5 -> 0.40 + 0.35 + 0.125 = 0.875 (Good)
    report = evaluate_tool_calls(
        [
            sample({"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, id="a"),
            sample({"name": "get_weather", "arguments": {"city": "Paris", "days": 9}}, id="b"),
        ],
        TOOLS,
    )
    assert (report.tool_selection_accuracy, report.parameter_accuracy, report.execution_success) == (1.0, 1.0, 0.5)
    assert report.overall_score == pytest.approx(0.875)
    assert report.interpretation == "Good"


def test_overall_of_a_tool_right_but_parameters_wrong_sample():
    # selection 1, parameters 0, execution 0 -> 0.40 (Poor)
    report = evaluate_tool_calls([sample({"name": "get_weather", "arguments": {"days": 3}})], TOOLS)
    assert report.overall_score == pytest.approx(0.40)
    assert report.interpretation == "Poor"


def test_custom_weights_are_used():
    weights = {"tool_selection_accuracy": 0.5, "execution_success": 0.5}
    report = evaluate_tool_calls([sample({"name": "get_weather", "arguments": {"days": 3}})], TOOLS, weights=weights)
    assert report.overall_score == pytest.approx(0.5)


@pytest.mark.parametrize(
    "weights",
    [
        {"tool_selection_accuracy": 0.5, "parameter_accuracy": 0.4},
        {"tool_selection_accuracy": 1.2, "parameter_accuracy": -0.2},
        {"tool_selection_accuracy": 1.0, "latency": 0.0},
    ],
)
def test_custom_weights_must_be_non_negative_known_and_sum_to_1(weights):
    with pytest.raises(ValidationError):
        ScoreWeights.model_validate(weights)


def test_default_weights():
    assert ScoreWeights().model_dump() == {
        "tool_selection_accuracy": 0.40,
        "parameter_accuracy": 0.35,
        "execution_success": 0.25,
        "response_quality": 0.0,
    }


@pytest.mark.parametrize(
    ("score", "band"),
    [
        (1.0, "Excellent"),
        (0.90, "Excellent"),
        (0.4 + 0.35 + 0.15, "Excellent"),
        (0.8999, "Good"),
        (0.75, "Good"),
        (0.7499, "Fair"),
        (0.50, "Fair"),
        (0.4999, "Poor"),
        (0.0, "Poor"),
    ],
)
def test_interpretation_bands(score, band):
    assert interpret_score(score) == band


def test_response_quality_joins_the_overall_score_when_weighted():
    pytest.importorskip("rouge_score")
    weights = {"tool_selection_accuracy": 0.5, "response_quality": 0.5}
    good = sample(
        {"name": "get_weather", "arguments": {"city": "Paris"}}, expected_response="It is sunny", response="It is sunny"
    )
    report = evaluate_tool_calls([good], TOOLS, weights=weights)
    assert report.response_quality == 1.0 and report.overall_score == pytest.approx(1.0)


# --- properties ------------------------------------------------------------------------------

predicted = st.one_of(
    st.none(),
    st.just([]),
    st.builds(
        lambda n, a: {"name": n, "arguments": a},
        st.sampled_from(["get_weather", "web_search", "nope"]),
        st.dictionaries(
            st.sampled_from(["city", "days", "query", "x"]),
            st.one_of(st.integers(-2, 9), st.text(max_size=3), st.booleans(), st.none()),
            max_size=3,
        ),
    ),
    st.text(max_size=10),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(predicted, max_size=6))
def test_every_dataset_score_is_in_0_1(predictions):
    report = evaluate_tool_calls([sample(p, id=str(i)) for i, p in enumerate(predictions)], TOOLS)
    for value in (
        report.tool_selection_accuracy,
        report.parameter_accuracy,
        report.execution_success,
        report.overall_score,
    ):
        assert value is None or 0.0 <= value <= 1.0


@settings(max_examples=50, deadline=None)
@given(st.fixed_dictionaries({"city": st.text(max_size=5), "days": st.integers(1, 7)}))
def test_a_prediction_identical_to_the_reference_scores_1(arguments):
    expected = {"name": "get_weather", "arguments": arguments}
    report = evaluate_tool_calls([sample(expected, expected=expected)], TOOLS, compare_values=True)
    assert report.overall_score == pytest.approx(1.0)
