"""The `reflection check` command on the shipped example data and on bad rows."""

import json

from typer.testing import CliRunner

from reflection._resources import example_path
from reflection.cli import app
from reflection.model import STATIC_CHECKS
from reflection.testing.server import StandInJudge

runner = CliRunner()


def rows_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_static_only_check_writes_one_row_per_input_row(tmp_path):
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["check", str(example_path("calls.jsonl")), "-o", str(out), "--static-only"])
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in rows_of(out)}
    assert len(rows) == 12
    for row in rows.values():
        if "error" not in row:
            assert all(row[f"static_{c}"] in (0.0, 1.0) for c in STATIC_CHECKS)
            assert row["results"][0]["static"]["checks"].keys() == set(STATIC_CHECKS)
    assert rows["weather-ok"]["overall_valid"] is True
    assert rows["flight-missing-date"]["static_missing_required_parameter"] == 0.0
    assert rows["broken-json-arguments"]["static_invalid_tool_call"] == 0.0
    assert rows["no-tools"]["static_empty_api_spec"] == 0.0
    assert len(rows["parallel"]["results"]) == 2
    assert rows["line-12"]["overall_valid"] is None and "not valid JSON" in rows["line-12"]["error"]
    assert "judge skipped: --static-only" in result.stderr


def test_rows_without_a_call_become_error_rows_and_the_run_goes_on(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "tools": []}\n[1, 2]\n{"id": "b", "tools": [], "call": {"name": "f"}}\n')
    out = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["check", str(src), "-o", str(out)]).exit_code == 0
    rows = {row["id"]: row for row in rows_of(out)}
    assert 'no "call"' in rows["a"]["error"]
    assert "expected a JSON object" in rows["line-2"]["error"]
    assert rows["b"]["static_empty_api_spec"] == 0.0


def test_without_a_judge_the_command_says_it_was_skipped(tmp_path):
    result = runner.invoke(app, ["check", str(example_path("calls.jsonl")), "-o", str(tmp_path / "o.jsonl")])
    assert "judge skipped: no judge configured" in result.stderr


def test_check_with_the_judge_from_flags(tmp_path):
    out = tmp_path / "out.jsonl"
    with StandInJudge() as server:
        result = runner.invoke(
            app,
            [
                "check",
                str(example_path("calls.jsonl")),
                "-o",
                str(out),
                "--base-url",
                server.base_url,
                "--model",
                "stand-in",
            ],
        )
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in rows_of(out)}
    assert rows["weather-ok"]["semantic_avg_score_general"] == 1.0 and rows["weather-ok"]["overall_valid"] is True
    assert rows["flight-missing-date"]["judge_skipped"].startswith("the static stage failed")


def test_check_with_the_judge_from_a_config_file_and_environment(tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    with StandInJudge() as server:
        config = tmp_path / "config.yaml"
        config.write_text(f"judge:\n  base_url: {server.base_url}\n  model: from-file\nmode: combined\n")
        monkeypatch.setenv("REFLECTION_MODE", "per_check")
        result = runner.invoke(
            app, ["check", str(example_path("calls.jsonl")), "-o", str(out), "--config", str(config)]
        )
    assert result.exit_code == 0, result.output
    assert {row["id"]: row for row in rows_of(out)}["weather-ok"]["usage"]["requests"] == 4  # env beats file


def test_score_with_the_stand_in_judge_fills_the_judged_metrics(tmp_path):
    out = tmp_path / "scores.jsonl"
    with StandInJudge() as server:
        result = runner.invoke(
            app,
            [
                "score",
                str(example_path("scoring/predictions.jsonl")),
                "--references",
                str(example_path("scoring/references.jsonl")),
                "-o",
                str(out),
                "--base-url",
                server.base_url,
                "--model",
                "stand-in",
            ],
        )
    assert result.exit_code == 0, result.output
    rows = rows_of(out)
    judged = [row for row in rows if row["tool_selection_judged"] is not None]
    assert judged and all(row["judge_error"] is None for row in rows)
    assert all(row["tool_selection_judged"] == 1.0 for row in judged)
    assert all(row["trajectory_correctness"] == row["trajectory_match"] for row in judged)  # min(match, 1.0)


def test_serve_with_an_invalid_config_says_so_once_on_one_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("gate:\n  bogus: 1\n")
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: invalid configuration in {config}: unknown key 'gate.bogus'"


def test_the_score_summary_prints_install_hints_literally_not_as_markup(tmp_path):
    # `[metrics]` in "pip install 'toolcall-reflection[metrics]'" is text, not a rich style tag.
    from rich.console import Console

    from reflection.cli.score import _table

    scored = runner.invoke(
        app,
        [
            "score",
            str(example_path("scoring/predictions.jsonl")),
            "--references",
            str(example_path("scoring/references.jsonl")),
            "-o",
            str(tmp_path / "s.jsonl"),
            "--json-summary",
        ],
    )
    data = json.loads(scored.stdout)
    data["metrics"]["response_rouge_l"]["n"] = 0  # as when the metrics extra is not installed
    console = Console(record=True, width=300)
    console.print(_table(data))
    assert "pip install 'toolcall-reflection[metrics]'" in console.export_text()


def test_the_command_prints_its_version():
    import reflection

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"reflection {reflection.__version__} (toolcall-reflection)\n"


def test_report_refuses_an_input_file_with_a_clear_message():
    result = runner.invoke(app, ["report", str(example_path("calls.jsonl"))])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"error: {example_path('calls.jsonl')} is not a reflection result file: its row 'weather-ok' has no "
        '"overall_valid" (it has the members of an input row); report on the output of `reflection batch` or '
        "`reflection check`, e.g. `reflection batch DATASET -o results.jsonl` then `reflection report results.jsonl`"
    )


def test_report_on_check_output_works(tmp_path):
    out = tmp_path / "o.jsonl"
    assert (
        runner.invoke(app, ["check", str(example_path("calls.jsonl")), "--static-only", "-o", str(out)]).exit_code == 0
    )
    result = runner.invoke(app, ["report", str(out), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["rows"] == 12


def test_a_401_names_the_environment_variable_the_key_came_from(tmp_path, monkeypatch):
    from reflection.testing.server import FaultyStandInJudge

    monkeypatch.setenv("TEAM_JUDGE_KEY", "sk-team-key-123456")
    config = tmp_path / "c.yaml"

    with FaultyStandInJudge(transport_fault="status", status=401, idle_timeout=30) as server:
        config.write_text(f"judge:\n  base_url: {server.base_url}\n  model: stand-in\n  api_key_env: TEAM_JUDGE_KEY\n")
        result = runner.invoke(
            app, ["check", str(example_path("calls.jsonl")), "-o", str(tmp_path / "o.jsonl"), "--config", str(config)]
        )
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(
        "HTTP 401: Incorrect API key provided (API key from the environment variable TEAM_JUDGE_KEY)"
    )
    assert "sk-team-key" not in result.output
