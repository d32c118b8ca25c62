"""`reflection score`: JSON Lines joined by id, per-sample rows, error rows, and the summary."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from reflection.scoring import JUDGED_KEYS, SCORE_KEYS, score_files
from reflection.cli.score import score

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scoring"


def app() -> typer.Typer:
    cli = typer.Typer()
    cli.command("score")(score)
    cli.command("noop")(lambda: None)  # two commands, so "score" is addressed by name as in reflection.cli
    return cli


def write(path: Path, rows) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def rows_by_id(text: str) -> dict:
    return {row["id"]: row for row in map(json.loads, text.splitlines())}


def test_example_files_score_to_per_sample_rows_and_a_summary_table(tmp_path):
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        app(),
        [
            "score",
            str(EXAMPLES / "predictions.jsonl"),
            "--references",
            str(EXAMPLES / "references.jsonl"),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_id = {r["id"]: r for r in rows if r["error"] is None or r["tool_selection_accuracy"] is not None}
    assert by_id["weather-1"]["binary_tool_call"] == 1.0
    assert by_id["weather-2"]["tool_call_equivalence"] == 1.0  # units left to its default
    assert by_id["weather-2"]["binary_tool_call"] == 0.0
    assert by_id["search-1"]["staged_tool_call"] == 0.75  # 5.0 where 5 was expected
    assert by_id["no-call-1"]["no_call"] is True
    assert by_id["unknown-1"]["unknown_tool"] is True
    assert by_id["agent-1"]["trajectory_correctness"] == 0.75  # suffix stripped; one argument differs
    assert by_id["broken-1"]["staged_tool_call"] == 0.0
    errors = {r["id"]: r["error"] for r in rows if r["trajectory_correctness"] is None}
    assert errors == {
        "weather-1": "predictions line 9 repeats id 'weather-1'; only the first one is scored",
        "line-10": errors["line-10"],
        "orphan-1": "no prediction has id 'orphan-1'",
    }
    assert "not valid JSON" in errors["line-10"]
    assert "overall" in result.stdout and "error rows" in result.stdout


def test_json_summary(tmp_path):
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        app(),
        [
            "score",
            str(EXAMPLES / "predictions.jsonl"),
            "--references",
            str(EXAMPLES / "references.jsonl"),
            "-o",
            str(out),
            "--json-summary",
        ],
    )
    summary = json.loads(result.stdout)
    assert summary["error_rows"] == 3
    assert summary["no_call"] == summary["unknown_tool"] == 1
    assert set(summary["metrics"]) == set(SCORE_KEYS + JUDGED_KEYS)
    assert summary["interpretation"] in ("Excellent", "Good", "Fair", "Poor")


def test_rows_go_to_stdout_and_the_summary_to_stderr_without_output(tmp_path):
    predictions = write(tmp_path / "p.jsonl", [{"id": 1, "tool_calls": [{"name": "f", "arguments": "{}"}]}])
    references = write(tmp_path / "r.jsonl", [{"id": 1, "expected_tool_calls": [{"name": "f", "arguments": {}}]}])
    result = CliRunner().invoke(app(), ["score", str(predictions), "--references", str(references), "--json-summary"])
    assert result.exit_code == 0
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["id"] == "1" and row["binary_tool_call"] == 1.0
    assert json.loads(result.stderr)["metrics"]["binary_tool_call"] == {"mean": 1.0, "n": 1}


def test_unreadable_and_unjoinable_rows_become_error_rows(tmp_path):
    predictions = write(
        tmp_path / "p.jsonl",
        [
            '{"id": "a", "tool_calls": ',
            [1, 2],
            {"tool_calls": []},
            {"id": "b", "tool_calls": [{"name": "f"}]},
            {"id": "c", "tool_calls": [{"name": "f"}]},
            {"id": "d", "tool_calls": [{"name": "f"}]},
        ],
    )
    references = write(
        tmp_path / "r.jsonl",
        [
            {"id": "c", "expected_tool_calls": [{"name": "f", "arguments": "{broken"}]},
            {"id": "d", "query": "no expected calls at all"},
            "{oops",
        ],
    )
    rows = list(score_files(predictions, references))
    errors = [(r["id"], r["error"]) for r in rows]
    assert all(all(r[k] is None for k in SCORE_KEYS) for r in rows)
    assert len(rows) == 7
    messages = " | ".join(e for _, e in errors)
    for expected in (
        "references line 3 is not valid JSON",
        "predictions line 1 is not valid JSON",
        "predictions line 2 is not a JSON object",
        'predictions line 3 has no usable "id"',
        "no reference has id 'b'",
        "expected call #0 is not readable",
        "no expected calls",
    ):
        assert expected in messages


def test_a_prediction_that_is_not_json_scores_0_instead_of_failing(tmp_path):
    predictions = write(tmp_path / "p.jsonl", [{"id": "x", "tool_call": "get_weather(city='Paris')"}])
    references = write(
        tmp_path / "r.jsonl",
        [{"id": "x", "expected_tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    )
    (row,) = score_files(predictions, references)
    assert row["staged_tool_call"] == row["tool_selection_accuracy"] == row["trajectory_correctness"] == 0.0
    assert "not valid JSON" in row["error"]


def test_a_missing_file_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(
        app(), ["score", str(tmp_path / "nope.jsonl"), "--references", str(tmp_path / "r.jsonl")]
    )
    assert result.exit_code == 2


@pytest.mark.parametrize("key", ["tool_calls", "tool_call", "call", "prediction"])
def test_every_prediction_field_is_accepted(tmp_path, key):
    value = {"name": "f", "arguments": {"x": 1}}
    predictions = write(tmp_path / "p.jsonl", [{"id": 1, key: [value] if key == "tool_calls" else value}])
    references = write(tmp_path / "r.jsonl", [{"id": 1, "expected": value}])
    (row,) = score_files(predictions, references)
    assert row["binary_tool_call"] == 1.0
