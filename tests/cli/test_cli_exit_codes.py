"""Exit statuses a CI job can gate on: `--fail-on invalid|unknown|error` on `check` and
`batch`, exit 3 when the judge answered none of the rows it was asked about, and a closed
stdout (`| head`) ending a command quietly with 141, as a Unix tool ended by SIGPIPE."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reflection.cli.common import CLOSED_STDOUT, NO_VERDICTS, fail_on_option
from reflection._resources import example_path
from reflection.cli import app
from reflection.testing import FakeJudge
from reflection.testing.server import FaultyStandInJudge, StandInJudge

pytestmark = pytest.mark.slow  # processes, servers or subprocess CLI runs: `pytest -m "not slow"` leaves them out

runner = CliRunner()
CALLS = str(example_path("calls.jsonl"))  # 12 rows: 3 valid, 8 invalid, 1 error (static)


def last_line(stderr):
    return stderr.strip().splitlines()[-1]


# --- --fail-on ------------------------------------------------------------------------------------


def test_fail_on_takes_a_comma_list_or_repeats_and_keeps_one_order():
    assert fail_on_option(["error,invalid", "unknown", " Invalid "]) == ["invalid", "unknown", "error"]
    assert fail_on_option([]) == []


def test_an_unknown_fail_on_kind_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["check", CALLS, "--static-only", "-o", str(tmp_path / "o.jsonl"), "--fail-on", "bad"])
    assert result.exit_code == 2
    assert "'bad' is not one of invalid, unknown, error" in result.output


@pytest.mark.parametrize(
    ("fail_on", "status", "reason"),
    [
        ([], 0, None),
        (["--fail-on", "invalid"], 1, "failed: 8 invalid of 12 rows (--fail-on invalid)"),
        (["--fail-on", "error,invalid"], 1, "failed: 8 invalid, 1 error of 12 rows (--fail-on invalid,error)"),
        (["--fail-on", "unknown"], 0, None),
    ],
)
def test_check_exits_1_with_a_one_line_reason_when_a_fail_on_row_is_there(tmp_path, fail_on, status, reason):
    result = runner.invoke(app, ["check", CALLS, "--static-only", "-o", str(tmp_path / "o.jsonl"), *fail_on])
    assert result.exit_code == status, result.output
    if reason:
        assert last_line(result.stderr) == reason
    else:
        assert "failed:" not in result.stderr


def test_batch_fail_on_counts_the_whole_output_resumed_rows_too(tmp_path):
    out = str(tmp_path / "o.jsonl")
    assert runner.invoke(app, ["batch", CALLS, "-o", out, "--static-only", "--no-progress"]).exit_code == 0
    again = runner.invoke(app, ["batch", CALLS, "-o", out, "--static-only", "--no-progress", "--fail-on", "error"])
    assert "12 already there" in again.stderr  # nothing reflected this time: the rows of OUTPUT decide
    assert again.exit_code == 1
    assert last_line(again.stderr) == "failed: 1 error of 12 rows (--fail-on error)"


def test_fail_on_unknown_fails_a_run_where_the_judge_failed_on_one_row(tmp_path):
    with FakeJudge(max_attempts=1) as judge:
        judge.fail(500, times=1)  # the first of the 3 judged rows; the other two are answered
        result = runner.invoke(
            app,
            [
                "check",
                CALLS,
                "-o",
                str(tmp_path / "o.jsonl"),
                "--base-url",
                judge.base_url,
                "--model",
                judge.model,
                "--concurrency",
                "1",
                "--fail-on",
                "unknown",
            ],
            env={"REFLECTION_JUDGE__MAX_ATTEMPTS": "1"},
        )
    assert result.exit_code == 1, result.output
    assert last_line(result.stderr) == "failed: 1 unknown of 12 rows (--fail-on unknown)"


@pytest.mark.parametrize("command", ["check", "batch"])
def test_a_judge_that_answers_no_row_exits_3_even_without_fail_on(tmp_path, command):
    with FaultyStandInJudge(transport_fault="status", status=500, idle_timeout=60) as server:
        args = [command, CALLS, "-o", str(tmp_path / "o.jsonl"), "--base-url", server.base_url, "--model", "stand-in"]
        result = runner.invoke(
            app, args + (["--no-progress"] if command == "batch" else []), env={"REFLECTION_JUDGE__MAX_ATTEMPTS": "1"}
        )
    assert result.exit_code == NO_VERDICTS, result.output
    assert last_line(result.stderr) == (
        "error: no verdicts: the judge answered none of the 3 rows it was asked "
        "about (3 unknown); see the judge errors (exit 3)"
    )


def test_static_only_rows_are_never_no_verdicts(tmp_path):
    result = runner.invoke(app, ["check", CALLS, "--static-only", "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 0 and "no verdicts" not in result.stderr


# --- a closed stdout ------------------------------------------------------------------------------


def run_into_head(args, cwd, lines=1):
    """`reflection ARGS | head -n LINES` in a real shell: (reflection's status, its stderr)."""
    cli = " ".join([f"'{sys.executable}'", "-m", "reflection.cli", *[f"'{a}'" for a in args]])
    done = subprocess.run(
        ["bash", "-c", f"{cli} 2>err.txt | head -n {lines} >/dev/null; echo ${{PIPESTATUS[0]}}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return int(done.stdout.strip()), (Path(cwd) / "err.txt").read_text()


@pytest.fixture
def many_rows(tmp_path):
    """A dataset whose result rows are far more than a pipe holds (~64 KiB)."""
    rows = [line for line in Path(CALLS).read_text().splitlines() if line.startswith("{")]
    path = tmp_path / "many.jsonl"
    with path.open("w") as f:
        for n in range(150):
            for line in rows:
                row = json.loads(line)
                row["id"] = f"{row.get('id')}-{n}"
                f.write(json.dumps(row) + "\n")
    return path


def test_check_into_head_exits_141_quietly(tmp_path, many_rows):
    status, stderr = run_into_head(["check", str(many_rows), "--static-only", "--workers", "1"], tmp_path)
    assert status == CLOSED_STDOUT
    assert "Broken pipe" not in stderr and "error" not in stderr and "Traceback" not in stderr, stderr


def test_check_with_a_judge_into_head_exits_141_quietly(tmp_path, many_rows):
    with StandInJudge(idle_timeout=120) as server:
        status, stderr = run_into_head(
            ["check", str(many_rows), "--base-url", server.base_url, "--model", "stand-in"], tmp_path
        )
    assert status == CLOSED_STDOUT
    assert stderr.strip() == "", stderr


def test_report_into_head_still_writes_the_html(tmp_path, many_rows):
    out = tmp_path / "out.jsonl"
    assert (
        runner.invoke(app, ["batch", str(many_rows), "-o", str(out), "--static-only", "--no-progress"]).exit_code == 0
    )
    # `head -n 0` has gone before the report is printed: the report is smaller than a pipe holds.
    status, stderr = run_into_head(["report", str(out), "--html", str(tmp_path / "r.html")], tmp_path, lines=0)
    assert status == CLOSED_STDOUT
    assert (tmp_path / "r.html").read_text().lower().startswith("<!doctype html>")
    assert stderr.strip() == f"wrote the HTML report to {tmp_path / 'r.html'}"


def test_a_file_read_to_its_end_by_the_reader_is_exit_0(tmp_path):
    status, _ = run_into_head(["check", CALLS, "--static-only"], tmp_path, lines=1000)
    assert status == 0
