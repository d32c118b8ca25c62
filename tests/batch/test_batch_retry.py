"""Resume asks again what the judge failed: a rerun of `reflection batch` replaces rows whose
judge failed, ids stay unique, the report agrees, and `--no-retry-unknown` keeps them."""

import json
import os

import anyio
import httpx
import pytest
import respx
from typer.testing import CliRunner

from reflection.batch import read_report, run_batch
from reflection.cli import app
from reflection.batch._output import OutputFile, iter_output_rows, judge_failed
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig
from reflection.judge import Judge, JudgeConfig, JudgeError
from reflection.testing._protocol import completion
from reflection.testing.server import StandInJudge

runner = CliRunner()


def judge_config(server):
    return ReflectionConfig(judge=JudgeConfig(base_url=server.base_url, model="stand-in", max_attempts=1))


def ids_of(path):
    return [row["id"] for row in iter_output_rows(path)]


@pytest.fixture
def failed_output(tmp_path):
    """An output whose judged rows all lack a verdict: the judge answered HTTP 500 throughout."""
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(12))
    out = tmp_path / "out.jsonl"
    with StandInJudge(fault_rate=1.0, faults=("500",), idle_timeout=30) as broken:
        anyio.run(lambda: run_batch(source, out, config=judge_config(broken), cache=False))
    failed = [row["id"] for row in iter_output_rows(out) if judge_failed(row)]
    assert failed and len(failed) < 12  # static failures are definite verdicts, never retried
    return source, out, failed


async def test_a_rerun_replaces_the_rows_whose_judge_failed_without_duplicating_ids(failed_output):
    source, out, failed = failed_output
    with StandInJudge(idle_timeout=30) as server:
        stats = await run_batch(source, out, config=judge_config(server))
        again = await run_batch(source, out, config=judge_config(server))
    ids = ids_of(out)
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 12
    assert (stats.retried, stats.written, stats.skipped) == (len(failed), len(failed), 12 - len(failed))
    assert not any(judge_failed(row) for row in iter_output_rows(out))
    assert (again.retried, again.written) == (0, 0)
    report = read_report(out)
    assert (report.rows, report.unknown, report.error) == (12, 0, 0)
    assert report.error_reasons == []


def test_no_retry_unknown_keeps_the_failed_rows_untouched(failed_output):
    source, out, failed = failed_output
    before = out.read_bytes()
    with StandInJudge(idle_timeout=30) as server:
        result = runner.invoke(
            app,
            [
                "batch",
                str(source),
                "-o",
                str(out),
                "--base-url",
                server.base_url,
                "--model",
                "stand-in",
                "--no-progress",
                "--no-retry-unknown",
            ],
        )
        assert server.requests == 0
    assert result.exit_code == 3, result.output  # every judged row kept unknown: no verdicts (see test_cli_exit_codes)
    assert out.read_bytes() == before


def test_the_cli_says_how_many_rows_it_asked_again(failed_output):
    source, out, failed = failed_output
    with StandInJudge(idle_timeout=30) as server:
        result = runner.invoke(
            app,
            [
                "batch",
                str(source),
                "-o",
                str(out),
                "--base-url",
                server.base_url,
                "--model",
                "stand-in",
                "--no-progress",
                "--json-report",
            ],
        )
    assert result.exit_code == 0, result.output
    assert f"{len(failed)} whose judge had failed asked again (replaced)" in result.stderr
    assert json.loads(result.stdout)["unknown"] == 0


async def test_a_failed_row_whose_id_is_not_in_the_input_is_kept(failed_output, tmp_path):
    source, out, failed = failed_output
    others = [row for row in synthetic_rows(12) if row["id"] != failed[0]]
    with StandInJudge(idle_timeout=30) as server:
        stats = await run_batch(write_jsonl(tmp_path / "fewer.jsonl", others), out, config=judge_config(server))
    rows = {row["id"]: row for row in iter_output_rows(out)}
    assert stats.retried == len(failed) - 1
    assert len(rows) == 12 and judge_failed(rows[failed[0]])


async def test_a_symlinked_output_is_rewritten_through_the_link(failed_output, tmp_path):
    source, out, failed = failed_output
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)
    os.chmod(out, 0o640)
    with StandInJudge(idle_timeout=30) as server:
        stats = await run_batch(source, link, config=judge_config(server))
    assert stats.retried == len(failed)
    assert link.is_symlink() and link.resolve() == out.resolve()
    assert os.stat(out).st_mode & 0o777 == 0o640
    assert sorted(ids_of(out)) == sorted(r["id"] for r in synthetic_rows(12))
    assert not list(tmp_path.glob(".*.rewrite"))


async def test_without_a_judge_nothing_is_retried(failed_output):
    source, out, failed = failed_output
    before = out.read_bytes()
    stats = await run_batch(source, out, config=ReflectionConfig())
    assert (stats.retried, stats.written) == (0, 0)
    assert out.read_bytes() == before


def test_only_verdicts_lost_to_the_judge_count_as_judge_failures():
    error_check = {"results": [{"semantic": {"c": {"status": "error", "error": "HTTP 500"}}}]}
    assert judge_failed({"id": "a", "overall_valid": None, **error_check})
    assert not judge_failed({"id": "b", "overall_valid": False, **error_check})  # a definite failure elsewhere
    assert not judge_failed({"id": "c", "overall_valid": None, "error": "bad row"})
    assert not judge_failed(
        {"id": "d", "overall_valid": None, "results": [{"semantic": {"c": {"status": "uncertain"}}}]}
    )


def test_a_drop_that_fails_leaves_the_output_as_it_was(failed_output, monkeypatch):
    source, out, failed = failed_output
    before = out.read_bytes()
    output = OutputFile(out, retry=judge_failed)
    output.open()

    def broken_replace(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        output.drop(failed)
    assert out.read_bytes() == before
    assert not list(out.parent.glob(".*.rewrite"))


# --- the cache stores only replies that validated ---------------------------------------------


class RecordingCache:
    def __init__(self):
        self.stored = {}

    async def get(self, key):
        return self.stored.get(key)

    async def put(self, key, value):
        self.stored[key] = value


def validate(data):
    if data.get("score") not in (1, 2, 3, 4, 5):
        raise ValueError("score must be 1-5")
    return data["score"]


@respx.mock(base_url="http://judge.test/v1")
async def test_the_cache_never_stores_a_reply_that_did_not_validate(respx_mock):
    messages = [{"role": "user", "content": "rate"}]

    def reply(score):
        return httpx.Response(200, json=completion(json.dumps({"score": score}), {"messages": messages}))

    respx_mock.post("/chat/completions").mock(side_effect=[reply(9), reply(9), reply(9), reply(7), reply(4)])
    cache = RecordingCache()
    config = JudgeConfig(base_url="http://judge.test/v1", model="m", api_key="k" * 10, max_attempts=3, retry_max_wait=0)
    async with Judge(config, cache=cache) as judge:
        with pytest.raises(JudgeError):
            await judge.ask(messages, schema={}, schema_name="t", validate=validate, cache_key="a")
        assert cache.stored == {}
        answer = await judge.ask(messages, schema={}, schema_name="t", validate=validate, cache_key="b")
    assert answer.value == 4 and cache.stored == {"b": {"score": 4}}


def test_the_report_shows_the_real_http_status_and_the_servers_message(failed_output):
    source, out, failed = failed_output
    result = runner.invoke(app, ["report", str(out), "--json"])
    assert result.exit_code == 0, result.output
    reasons = {r["reason"]: r["rows"] for r in json.loads(result.stdout)["error_reasons"]}
    assert reasons and set(reasons.values()) == {len(failed)}
    assert all(
        reason.endswith(": HTTP 500 from the judge endpoint: internal error (after N request(s))") for reason in reasons
    )


@pytest.mark.parametrize("results", [5, [{"semantic": [1]}], [7, {"semantic": {"x": "error"}}], None])
def test_rows_of_another_shape_are_not_judge_failures_and_do_not_raise(results):
    assert judge_failed({"id": "a", "overall_valid": None, "results": results}) is False


async def test_a_failed_row_whose_line_is_now_over_max_line_bytes_is_kept_not_lost(failed_output):
    source, out, failed = failed_output
    line = next(line for line in source.read_bytes().splitlines() if json.loads(line)["id"] == failed[0])
    with StandInJudge(idle_timeout=30) as server:
        limited = judge_config(server).model_copy(update={"max_line_bytes": len(line) - 1})
        await run_batch(source, out, config=limited)
    ids = ids_of(out)
    assert ids.count(failed[0]) == 1  # read as an over-long line now, so not dropped and never re-read
    assert len(ids) == len(set(ids))


def test_a_run_killed_while_asking_again_leaves_every_old_row_in_place(failed_output):
    import signal
    import subprocess
    import sys
    import time

    source, out, failed = failed_output
    before = out.read_bytes()
    side = out.with_name(f".{out.name}.retried")
    with StandInJudge(latency=0.3, idle_timeout=60) as server:
        command = [
            sys.executable,
            "-m",
            "reflection.cli",
            "batch",
            str(source),
            "-o",
            str(out),
            "--base-url",
            server.base_url,
            "--model",
            "stand-in",
            "--concurrency",
            "1",
            "--no-progress",
        ]
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not side.exists():  # a first row asked again has landed
                assert child.poll() is None, child.stderr.read().decode()
                time.sleep(0.01)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait()
            child.stderr.close()
        assert child.returncode == -signal.SIGKILL
        assert out.read_bytes() == before  # nothing asked again is missing, nothing is there twice

        stats = anyio.run(lambda: run_batch(source, out, config=judge_config(server)))
    assert stats.retried == len(failed)
    ids = ids_of(out)
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 12
    assert not any(judge_failed(row) for row in iter_output_rows(out))
    assert not side.exists()
