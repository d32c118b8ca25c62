"""kill -9 in the middle of `reflection batch`, then resume: every id exactly once, every line whole."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from reflection.batch import run_batch
from reflection.batch._workers import MIN_INPUT_BYTES
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig
from reflection.judge import JudgeConfig
from reflection.testing.server import StandInJudge

pytestmark = pytest.mark.slow  # processes, servers or subprocess CLI runs: `pytest -m "not slow"` leaves them out

ROWS = 150


def lines_of(path):
    data = path.read_bytes()
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


async def test_a_run_killed_mid_way_resumes_without_losing_or_repeating_a_row(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(ROWS))
    out = tmp_path / "out.jsonl"
    with StandInJudge(latency=0.2, idle_timeout=60) as server:
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
            "4",
            "--no-progress",
        ]
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            # Wait for some judged rows to land, then kill without warning.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (not out.exists() or len(lines_of(out)) < 40):
                assert child.poll() is None, child.stderr.read().decode()
                time.sleep(0.02)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait()
            child.stderr.close()
        assert child.returncode == -signal.SIGKILL

        killed = lines_of(out)
        assert 40 <= len(killed) < ROWS, "the kill should land mid-run"
        for line in killed:
            json.loads(line)  # every line written before the kill is whole

        server.latency = 0.0
        config = ReflectionConfig(judge=JudgeConfig(base_url=server.base_url, model="stand-in"))
        stats = await run_batch(source, out, config=config, concurrency=8)

    assert stats.skipped == len(killed)
    assert stats.written == ROWS - len(killed)
    ids = [json.loads(line)["id"] for line in lines_of(out)]
    assert sorted(ids) == sorted(r["id"] for r in synthetic_rows(ROWS))
    assert out.read_bytes().endswith(b"\n")


def _children(pid):
    """The live processes whose parent is `pid` (read from /proc: Linux)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; workers die with their parent on Linux")
async def test_workers_die_with_a_killed_static_run_and_the_rerun_resumes(tmp_path):
    rows = 30_000
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(rows))
    assert source.stat().st_size >= MIN_INPUT_BYTES  # so the run really uses worker processes
    out = tmp_path / "out.jsonl"
    command = [
        sys.executable,
        "-m",
        "reflection.cli",
        "batch",
        str(source),
        "-o",
        str(out),
        "--static-only",
        "--workers",
        "2",
        "--no-progress",
    ]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out.exists() and lines_of(out) and len(_children(child.pid)) == 2):
            assert child.poll() is None, child.stderr.read().decode()
            time.sleep(0.01)
        workers = _children(child.pid)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
        child.stderr.close()
    assert len(workers) == 2 and 0 < len(lines_of(out)) < rows, "the kill should land mid-run, with both workers up"

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, workers)):
        time.sleep(0.01)
    assert not any(map(_alive, workers)), "the workers outlived their killed parent"

    stats = await run_batch(source, out, workers=2)  # the output is not locked by a leftover worker
    ids = [json.loads(line)["id"] for line in lines_of(out)]
    assert stats.written == rows - stats.skipped and len(ids) == len(set(ids)) == rows
