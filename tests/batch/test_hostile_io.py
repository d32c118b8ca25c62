"""Hostile and faulty files through the real `reflection` commands (issue 11, the I/O items).

Each test is named after the behaviour it holds. Commands run in-process through the typer app (the same
object the `reflection` script runs) unless a second process is the point: the output lock,
and loading the pytest plugin and the stand-in server without the `testing` extra.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
import tracemalloc

import pytest
from typer.testing import CliRunner

from reflection._resources import example_path
from reflection.cli import app

runner = CliRunner()

ESC = "\x1b"


def example_rows():
    """The shipped example rows that are JSON objects (the last example line is deliberately not JSON)."""
    rows = []
    for line in example_path("calls.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def good_row(rid):
    row = dict(example_rows()[0])
    row["id"] = rid
    return row


def jsonl_bytes(*rows):
    return b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in rows)


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def assert_user_error(result, *fragments):
    """One `error:` line on stderr, exit 2, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def rows_by_id(path):
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


# --- item 2: a bad row in any reader is an error row, and the rows after it are written ------


def test_jsonl_bad_utf8_surrogate_escape_and_bom_lines(tmp_path):
    src = tmp_path / "in.jsonl"
    bad_utf8 = json.dumps(good_row("bad-bytes")).encode().replace(b"Paris", b"Par\xffis")
    surrogate = json.dumps(good_row("x")).replace('"x"', '"lone"', 1).replace("Paris", "\\ud800").encode() + b"\n"
    src.write_bytes(b"\xef\xbb\xbf" + jsonl_bytes(good_row("bom"), bad_utf8 + b"\n", surrogate, good_row("after")))
    out = tmp_path / "out.jsonl"
    result = invoke("check", src, "-o", out, "--static-only")
    assert result.exit_code == 0, result.output
    rows = rows_by_id(out)
    assert "error" not in rows["bom"] and "error" not in rows["after"]
    assert "line 2 is not valid UTF-8 (byte 0xff" in rows["line-2"]["error"]
    assert "surrogate" in rows["line-3"]["error"]


def test_json_array_bad_utf8_and_surrogate_escape_elements(tmp_path):
    src = tmp_path / "in.json"
    parts = [
        json.dumps(good_row("first")).encode(),
        json.dumps(good_row("bad-bytes")).encode().replace(b"Paris", b"Pa\xc3ris"),
        json.dumps(good_row("lone")).replace("Paris", "\\ud800").encode(),
        json.dumps(good_row("last")).encode(),
    ]
    src.write_bytes(b"[" + b",\n".join(parts) + b"]")
    out = tmp_path / "out.jsonl"
    result = invoke("batch", src, "-o", out, "--no-progress")
    assert result.exit_code == 0, result.output
    rows = rows_by_id(out)
    assert set(rows) == {"first", "bad-bytes", "lone", "last"}
    assert "error" not in rows["first"] and "error" not in rows["last"]
    assert "element 2 of in.json is not valid UTF-8" in rows["bad-bytes"]["error"]
    assert "element 3 of in.json is not valid JSON" in rows["lone"]["error"]


def test_csv_bad_utf8_record(tmp_path):
    src = tmp_path / "in.csv"
    header = b"id,call,tools\n"

    def record(rid, city=b"Paris"):
        row = good_row(rid)
        call = json.dumps(row["call"]).encode().replace(b"Paris", city).replace(b'"', b'""')
        tools = json.dumps(row["tools"]).encode().replace(b'"', b'""')
        return rid.encode() + b',"' + call + b'","' + tools + b'"\n'

    src.write_bytes(b"\xef\xbb\xbf" + header + record("a") + record("b", b"Par\xe9s") + record("c"))
    out = tmp_path / "out.jsonl"
    result = invoke("batch", src, "-o", out, "--no-progress")
    assert result.exit_code == 0, result.output
    rows = rows_by_id(out)
    assert "error" not in rows["a"] and "error" not in rows["c"]
    assert "not valid UTF-8 (byte 0xe9" in rows["line-2"]["error"]


def test_parquet_json_column_with_a_surrogate_escape(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [good_row("a"), good_row("b"), good_row("c")]
    calls = [json.dumps(r["call"]) for r in rows]
    calls[1] = calls[1].replace("Paris", "\\udc00")
    table = pa.table({"id": [r["id"] for r in rows], "call": calls, "tools": [json.dumps(r["tools"]) for r in rows]})
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    out = tmp_path / "out.jsonl"
    result = invoke("batch", src, "-o", out, "--no-progress")
    assert result.exit_code == 0, result.output
    got = rows_by_id(out)
    assert "error" not in got["a"] and "error" not in got["c"]
    assert "not valid JSON" in got["b"]["error"]


# --- item 3: ids and error texts are never markup or control codes ----------------------------


HOSTILE_IDS = ["[/]", "[link=https://evil.example]click[/link]", f"{ESC}[31mred{ESC}]0;title\a", "[bold"]


def hostile_file(tmp_path):
    rows = []
    for i, rid in enumerate(HOSTILE_IDS):
        row = good_row(rid)
        row["call"] = {"name": f"no_such_tool_{i}", "arguments": {}}
        rows.append(row)
    rows.append({"id": f"{ESC}[2Jwipe[/]"})  # no call: an error row whose message carries the id
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(*rows))
    return src


def test_hostile_ids_survive_batch_and_report_as_plain_text(tmp_path):
    src, out = hostile_file(tmp_path), tmp_path / "out.jsonl"
    result = invoke("batch", src, "-o", out, "--no-progress")
    assert result.exit_code == 0, (result.output, result.exception)
    assert set(rows_by_id(out)) == set(HOSTILE_IDS) | {f"{ESC}[2Jwipe[/]"}
    for run in (result, invoke("report", out)):
        assert run.exit_code == 0, (run.output, run.exception)
        assert ESC not in run.output and "\a" not in run.output
        assert "[/]" in run.stdout and "[link=https://evil.example]click[/link]" in run.stdout
        assert "\\x1b[31mred" in run.stdout  # shown, escaped, not acted on
    assert invoke("report", out, "--json").exit_code == 0


def test_error_messages_on_the_terminal_carry_no_control_codes(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text('judge: {base_url: http://x, model: m, "\\e[31mkey": 1}\n')  # YAML's \e is ESC
    line = assert_user_error(invoke("check", hostile_file(tmp_path), "--config", cfg), "unknown key")
    assert ESC not in line and "\\x1b" in line


# --- item 8: a bounded line size ---------------------------------------------------------------


def test_a_line_over_max_line_bytes_is_an_error_row_and_the_run_goes_on(tmp_path):
    src = tmp_path / "in.jsonl"
    huge = {"id": "huge", "call": {"name": "x", "arguments": {"blob": "z" * 50_000}}}
    src.write_bytes(jsonl_bytes(good_row("a"), huge, good_row("b")))
    out = tmp_path / "out.jsonl"
    result = invoke("check", src, "-o", out, "--static-only", env={"REFLECTION_MAX_LINE_BYTES": "4096"})
    assert result.exit_code == 0, result.output
    rows = rows_by_id(out)
    assert "error" not in rows["a"] and "error" not in rows["b"]
    assert "line 2 is longer than the 4,096-byte limit" in rows["line-2"]["error"]


def test_an_endless_line_from_a_pipe_is_read_in_bounded_memory(tmp_path):
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    zeros = 24 * 1024 * 1024  # /dev/zero's kind of line, bounded so the test ends

    def feed():
        with open(fifo, "wb") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(zeros // len(chunk)):
                f.write(chunk)
            f.write(b"\n" + jsonl_bytes(good_row("after")))

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out = tmp_path / "out.jsonl"
    tracemalloc.start()
    try:
        result = invoke("check", fifo, "-o", out, "--static-only", env={"REFLECTION_MAX_LINE_BYTES": "65536"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    writer.join(10)
    assert result.exit_code == 0, result.output
    rows = rows_by_id(out)
    assert "longer than the 65,536-byte limit" in rows["line-1"]["error"]
    assert "error" not in rows["after"]
    assert peak < zeros / 4, peak  # the 24 MB line was never held


def test_a_device_is_refused_at_once():
    assert_user_error(invoke("check", "/dev/zero", "--static-only"), "/dev/zero is a device")


# --- item 10: the output is never one of the inputs -------------------------------------------


def test_check_refuses_its_input_as_output_also_through_a_symlink(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(good_row("a")))
    before = src.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    assert_user_error(invoke("check", src, "-o", src), "is the input file")
    assert_user_error(invoke("check", src, "-o", link), "is the input file")
    assert src.read_bytes() == before


def test_score_refuses_predictions_or_references_as_output(tmp_path):
    predictions = tmp_path / "p.jsonl"
    references = tmp_path / "r.jsonl"
    predictions.write_bytes(example_path("scoring/predictions.jsonl").read_bytes())
    references.write_bytes(example_path("scoring/references.jsonl").read_bytes())
    link = tmp_path / "link.jsonl"
    link.symlink_to(references)
    for output in (predictions, link):
        assert_user_error(invoke("score", predictions, "--references", references, "-o", output), "is the input file")
    assert predictions.read_bytes() == example_path("scoring/predictions.jsonl").read_bytes()
    assert references.read_bytes() == example_path("scoring/references.jsonl").read_bytes()


# --- item 11: only a last line without a newline is partial; foreign files are refused ---------


def test_batch_refuses_an_output_that_is_not_result_rows_and_leaves_it_unchanged(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(good_row("a")))
    notes = tmp_path / "notes.txt"
    notes.write_text("a note I want to keep\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(notes)
    for output in (notes, link):
        assert_user_error(invoke("batch", src, "-o", output, "--no-progress"), "line 1 is not a result row")
    assert notes.read_text() == "a note I want to keep\n"


def test_a_partial_last_row_is_still_cut_and_resumed(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(good_row("a"), good_row("b")))
    out = tmp_path / "out.jsonl"
    assert invoke("batch", src, "-o", out, "--no-progress").exit_code == 0
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0] + lines[1][:20])  # the second write cut short by a crash
    result = invoke("batch", src, "-o", out, "--no-progress")
    assert result.exit_code == 0, result.output
    assert "cut a partial last line" in result.stderr
    assert sorted(rows_by_id(out)) == ["a", "b"]


# --- item 12: one writer per output -----------------------------------------------------------


def test_a_second_batch_on_a_locked_output_stops_and_names_the_holder(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(good_row("a")))
    out = tmp_path / "out.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys
            from reflection.batch._output import OutputFile
            with OutputFile({str(out)!r}):
                print("locked", flush=True)
                sys.stdin.read()  # until the test closes our stdin (bounded by the timeout below)
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert_user_error(invoke("batch", src, "-o", out, "--no-progress"), f"being written by process {holder.pid}")
        assert out.read_bytes() == b""
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert invoke("batch", src, "-o", out, "--no-progress").exit_code == 0
    assert list(rows_by_id(out)) == ["a"]


# --- item 13: one error line, exit 2 ------------------------------------------------------------


def test_check_creates_a_missing_output_directory_and_reads_a_json_array(tmp_path):
    src = tmp_path / "in.json"
    src.write_text(json.dumps([good_row("a"), good_row("b")]))
    out = tmp_path / "new" / "dir" / "out.jsonl"
    result = invoke("check", src, "-o", out, "--static-only")
    assert result.exit_code == 0, result.output
    assert sorted(rows_by_id(out)) == ["a", "b"]
    assert all("error" not in row for row in rows_by_id(out).values())


def test_check_output_that_is_a_directory_or_unwritable(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(good_row("a")))
    assert_user_error(invoke("check", src, "-o", tmp_path), "is a directory")
    if os.path.exists("/dev/full"):
        assert_user_error(invoke("check", src, "-o", "/dev/full", "--static-only"), "No space left on device")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "ro"
        locked.mkdir()
        locked.chmod(0o500)
        assert_user_error(invoke("check", src, "-o", locked / "out.jsonl"), "Permission denied")


@pytest.mark.parametrize("command", ["check", "batch", "score"])
def test_bad_configuration_in_every_command(tmp_path, command):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl_bytes(good_row("a")))
    args = {
        "check": ["check", src],
        "batch": ["batch", src, "-o", tmp_path / "o.jsonl"],
        "score": [
            "score",
            example_path("scoring/predictions.jsonl"),
            "--references",
            example_path("scoring/references.jsonl"),
        ],
    }[command]
    malformed = tmp_path / "bad.yaml"
    malformed.write_text("judge: [unclosed\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("judge: {base_url: http://127.0.0.1:9/v1, model: m}\nthreshold: {}\n")
    assert_user_error(invoke(*args, "--config", malformed), "is not valid YAML (line 2")
    assert_user_error(invoke(*args, "--config", typo), "unknown key 'threshold' (did you mean 'thresholds'?)")
    if command != "score":
        assert_user_error(invoke(*args, "--mode", "bogus"), "mode: Input should be 'combined' or 'per_check'")


def test_report_on_rows_whose_usage_is_not_an_object(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"id": "a", "overall_valid": True, "usage": "lots"}) + "\n")
    assert_user_error(invoke("report", out), "row 'a': \"usage\" must be an object of numbers")


# --- item 14: messages that say what is wrong ---------------------------------------------------


def test_invalid_utf8_is_not_called_a_surrogate_problem(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"id": "a\xff", "call": {"name": "f"}}\n')
    out = tmp_path / "out.jsonl"
    assert invoke("check", src, "-o", out, "--static-only").exit_code == 0
    error = rows_by_id(out)["line-1"]["error"]
    assert "not valid UTF-8" in error and "surrogate" not in error


def test_a_fifo_is_read_not_reported_missing(tmp_path):
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(jsonl_bytes(good_row("a"))), daemon=True)
    writer.start()
    out = tmp_path / "out.jsonl"
    result = invoke("batch", fifo, "-o", out, "--no-progress")
    writer.join(10)
    assert result.exit_code == 0, result.output
    assert list(rows_by_id(out)) == ["a"]
    missing = tmp_path / "missing.jsonl"
    assert_user_error(invoke("check", missing), "input file not found")


# --- item 18: the plugin and the stand-in server load without the testing extra ---------------


def without_respx(tmp_path):
    """An environment where `import respx` fails, as when the `testing` extra is not installed."""
    blocker = tmp_path / "blocker"
    (blocker / "respx").mkdir(parents=True)
    (blocker / "respx" / "__init__.py").write_text("raise ImportError('No module named respx (blocked by the test)')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), *filter(None, [env.get("PYTHONPATH")])])
    return env


def test_pytest_runs_without_respx_and_the_fixture_names_the_extra(tmp_path):
    env = without_respx(tmp_path)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # respx's own plugin would not be installed either; load ours by name
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_user.py").write_text(
        textwrap.dedent("""
        def test_unrelated():
            assert 1 + 1 == 2

        def test_uses_the_fixture(fake_judge):
            pass
    """)
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "reflection.testing.plugin", str(tests)],
        env=env,
        cwd=tests,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 passed, 1 error" in run.stdout, run.stdout + run.stderr
    assert 'pip install "toolcall-reflection[testing]"' in run.stdout


def test_the_stand_in_server_starts_without_respx(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "reflection.testing.server", "--idle-timeout", "5"],
        env=without_respx(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_lock_moves_with_the_rewrite_that_replaces_judge_failures(tmp_path):
    from reflection.batch._output import OutputFile, OutputLocked

    out = tmp_path / "out.jsonl"
    failed = {"id": "a", "overall_valid": None, "results": [{"semantic": {"c": {"status": "error"}}}]}
    out.write_text(json.dumps(failed) + "\n" + json.dumps({"id": "b", "overall_valid": True}) + "\n")
    with OutputFile(out, retry=lambda row: row["id"] == "a") as first:
        assert first.drop({"a"}) == 1  # the file is replaced by a rewritten one
        with pytest.raises(OutputLocked, match="being written by process"):
            OutputFile(out).open()
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["b"]


def test_library_warnings_reach_the_terminal_as_one_plain_line(capsys):
    import logging

    from reflection._log import warnings_to_stderr

    warnings_to_stderr()
    logging.getLogger("reflection.judge").warning("server said %s", "\x1b[31mred\x1b]8;;http://x\x07\nsecond line")
    err = capsys.readouterr().err
    assert err == "warning: server said \\x1b[31mred\\x1b]8;;http://x\\x07\\x0asecond line\n"
