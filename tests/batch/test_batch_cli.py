"""`reflection batch` and `reflection report`: options in, the report out, user errors as exit 2."""

import json

import pytest
from typer.testing import CliRunner

from reflection.cli import app
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.testing.server import StandInJudge

runner = CliRunner()


@pytest.fixture
def source(tmp_path):
    return write_jsonl(tmp_path / "in.jsonl", synthetic_rows(9))


def test_batch_without_a_judge_says_so_and_prints_the_report(tmp_path, source):
    result = runner.invoke(app, ["batch", str(source), "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 0, result.output
    assert "judge skipped: no judge configured" in result.stderr
    assert "batch: 9 rows to reflect" in result.stderr  # plain progress: not a terminal
    assert "wrote 9 rows to" in result.stderr
    assert "9 rows: 6 (66.7%) valid, 3 (33.3%) invalid, 0 (0.0%) unknown, 0 (0.0%) error" in result.stdout
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 9


def test_batch_with_a_judge_from_flags_prints_a_json_report(tmp_path, source):
    with StandInJudge() as server:
        result = runner.invoke(
            app,
            [
                "batch",
                str(source),
                "-o",
                str(tmp_path / "out.jsonl"),
                "--base-url",
                server.base_url,
                "--model",
                "stand-in",
                "--concurrency",
                "4",
                "--json-report",
            ],
        )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["valid"], report["invalid"], report["unknown"], report["error"]) == (3, 6, 0, 0)
    assert report["judge"]["requests"] == 6
    assert report["means"]["semantic_general_hallucination_check"] == 0.625
    assert "6 judge requests, 0 cache hits" in result.stderr


def test_static_only_skips_a_configured_judge(tmp_path, source):
    result = runner.invoke(
        app,
        [
            "batch",
            str(source),
            "-o",
            str(tmp_path / "out.jsonl"),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--static-only",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "judge skipped: --static-only" in result.stderr


def test_rerun_reports_the_skipped_rows(tmp_path, source):
    out = tmp_path / "out.jsonl"
    runner.invoke(app, ["batch", str(source), "-o", str(out)])
    result = runner.invoke(app, ["batch", str(source), "-o", str(out)])
    assert result.exit_code == 0
    assert "wrote 0 rows" in result.stderr and "9 already there (skipped)" in result.stderr


def test_unknown_input_extension_exits_2_with_the_supported_ones(tmp_path):
    path = tmp_path / "rows.txt"
    path.write_text("{}")
    result = runner.invoke(app, ["batch", str(path), "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 2
    assert "error:" in result.stderr and "unknown input extension '.txt'" in result.stderr


def test_missing_input_exits_2(tmp_path):
    result = runner.invoke(app, ["batch", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 2
    assert "input file not found" in result.stderr


def test_report_prints_json_for_an_output_file(tmp_path, source):
    out = tmp_path / "out.jsonl"
    runner.invoke(app, ["batch", str(source), "-o", str(out)])
    result = runner.invoke(app, ["report", str(out), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["rows"] == 9
    assert report["top_failing_checks"][0]["check"] == "static_missing_required_parameter"
    assert report["top_failing_checks"][0]["example_ids"] == [
        "static_invalid-2",
        "static_invalid-5",
        "static_invalid-8",
    ]


def test_report_of_a_missing_file_exits_2(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2
    assert "output file not found" in result.stderr
