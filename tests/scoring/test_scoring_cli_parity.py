"""`reflection score` gives exactly what the Python API gives, for every metric, on many pairs:
single and multi-call predictions in every order, in OpenAI, Anthropic and plain shapes."""

import itertools
import json
import random

from typer.testing import CliRunner

from reflection.scoring import (
    SCORE_KEYS,
    ToolCallingEvaluator,
    binary_tool_call,
    exact_match,
    rouge_l,
    staged_tool_call,
    tool_call_equivalence,
    trajectory_correctness,
)
from tests.scoring.test_scoring_cli import app

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "units": {"type": "string", "default": "celsius"},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "delete_everything", "parameters": {"type": "object", "properties": {}}}},
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}},
        },
    },
]
REFERENCES = [
    {"name": "get_weather", "arguments": {"city": "Paris"}},
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "units": "celsius"}},
    {"name": "search", "arguments": {"q": "flights"}},
]
CALLS = [
    {"name": "get_weather", "arguments": {"city": "Paris"}},
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
    {"name": "get_weather", "arguments": {"city": "Paris", "days": 2.0, "units": "celsius"}},
    {"name": "get_weather", "arguments": {"city": "Oslo"}},
    {"name": "get_weather", "arguments": {"days": "two"}},
    {"name": "delete_everything", "arguments": {}},
    {"name": "search", "arguments": {"q": "flights"}},
    {"name": "not_a_tool", "arguments": {"x": 1}},
]


def openai(call, index):
    return {
        "id": f"c{index}",
        "type": "function",
        "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
    }


def anthropic(call, index):
    return {"type": "tool_use", "id": f"t{index}", "name": call["name"], "input": call["arguments"]}


def predictions():
    """(prediction value, response) pairs: none, one and several calls, every order of up to three."""
    rng = random.Random(14)
    yield None, None
    yield [], "Sorry, I cannot."
    yield "not json {", None
    yield {"role": "assistant", "content": "It is sunny."}, "It is sunny in Paris."
    for call in CALLS:
        yield call, None
        yield json.dumps(call), "The weather in Paris is sunny."
    for size in (2, 3):
        for combo in itertools.combinations(range(len(CALLS)), size):
            if rng.random() > 0.5:
                continue
            for order in itertools.permutations(combo):
                calls = [CALLS[i] for i in order]
                shape = rng.choice(["plain", "openai", "anthropic-message", "openai-message", "string"])
                if shape == "plain":
                    yield calls, None
                elif shape == "openai":
                    yield [openai(c, i) for i, c in enumerate(calls)], None
                elif shape == "string":
                    yield json.dumps(calls), "sunny"
                elif shape == "openai-message":
                    yield (
                        {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [openai(c, i) for i, c in enumerate(calls)],
                        },
                        None,
                    )
                else:
                    yield {"role": "assistant", "content": [anthropic(c, i) for i, c in enumerate(calls)]}, None


def api_row(prediction, response, reference):
    """Every metric of a row, from the public functions."""
    record = ToolCallingEvaluator().score_sample(
        {"id": "x", "expected": reference, "predicted": prediction, "tools": TOOLS}
    )
    try:
        trajectory = trajectory_correctness(
            prediction, [reference], evaluation_params=["input_parameters"], tools=TOOLS
        ).score
    except ValueError:  # not JSON: the file scorer counts it as no calls
        trajectory = trajectory_correctness([], [reference], evaluation_params=["input_parameters"]).score
    row = {
        "tool_call_equivalence": tool_call_equivalence(prediction, reference, TOOLS),
        "binary_tool_call": binary_tool_call(prediction, reference),
        "staged_tool_call": staged_tool_call(prediction, reference),
        "tool_selection_accuracy": float(record.tool_selection_accuracy),
        "parameter_accuracy": float(record.parameter_accuracy),
        "execution_success": float(record.execution_success),
        "trajectory_correctness": trajectory,
        "response_exact_match": None,
        "response_rouge_l": None,
    }
    if response is not None:
        row["response_exact_match"] = exact_match(response, "It is sunny in Paris.")
        row["response_rouge_l"] = rouge_l(response, "It is sunny in Paris.")
    return row


def test_the_cli_scores_every_pair_exactly_as_the_api(tmp_path):
    cases = [(p, r, ref) for p, r in predictions() for ref in REFERENCES]
    assert len(cases) > 600
    pred_rows, ref_rows = [], []
    for index, (prediction, response, reference) in enumerate(cases):
        row = {"id": index, "tool_calls": prediction}
        if response is not None:
            row["response"] = response
        pred_rows.append(row)
        ref_rows.append(
            {
                "id": index,
                "expected_tool_calls": [reference],
                "tools": TOOLS,
                "expected_response": "It is sunny in Paris.",
            }
        )
    predictions_file = tmp_path / "p.jsonl"
    references_file = tmp_path / "r.jsonl"
    predictions_file.write_text("\n".join(map(json.dumps, pred_rows)) + "\n")
    references_file.write_text("\n".join(map(json.dumps, ref_rows)) + "\n")
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        app(), ["score", str(predictions_file), "--references", str(references_file), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(cases)
    mismatches = []
    for row, (prediction, response, reference) in zip(rows, cases):
        want = api_row(prediction, response, reference)
        got = {key: row[key] for key in want}
        if got != want:
            mismatches.append((prediction, reference, got, want))
    assert not mismatches, mismatches[:3]
    assert set(want) <= set(SCORE_KEYS)


def test_the_issue_example_scores_as_the_api_in_either_order(tmp_path):
    reference = {"name": "get_weather", "arguments": {"city": "Paris"}}
    calls = [{"name": "delete_everything", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Paris"}}]
    predictions_file = tmp_path / "p.jsonl"
    predictions_file.write_text(
        "\n".join(json.dumps({"id": i, "tool_calls": order}) for i, order in enumerate([calls, calls[::-1]])) + "\n"
    )
    (tmp_path / "r.jsonl").write_text(
        "\n".join(json.dumps({"id": i, "expected_tool_calls": [reference]}) for i in range(2)) + "\n"
    )
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        app(), ["score", str(predictions_file), "--references", str(tmp_path / "r.jsonl"), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    for line in out.read_text().splitlines():
        row = json.loads(line)
        assert (row["tool_call_equivalence"], row["binary_tool_call"], row["staged_tool_call"]) == (0.0, 0.0, 0.25)
        assert row["tool_selection_accuracy"] == 1.0  # the dataset evaluator scores the best call to the tool


def test_the_order_of_several_predicted_calls_never_changes_a_score():
    evaluator = ToolCallingEvaluator(TOOLS)
    for combo in itertools.combinations(CALLS, 3):
        for reference in REFERENCES:
            seen = set()
            for order in itertools.permutations(combo):
                record = evaluator.score_sample({"id": "x", "expected": reference, "predicted": list(order)})
                seen.add(
                    (
                        record.tool_selection_accuracy,
                        record.parameter_accuracy,
                        record.execution_success,
                        record.unknown_tool,
                        staged_tool_call(list(order), reference),
                        tool_call_equivalence(list(order), reference, TOOLS),
                    )
                )
            assert len(seen) == 1, (combo, reference, seen)
