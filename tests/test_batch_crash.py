"""kill -9 in the middle of `reflection batch`, then resume: every id exactly once, every line whole."""

import json
import os
import signal
import subprocess
import sys
import time

from reflection.batch import run_batch
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig
from reflection.judge import JudgeConfig
from reflection.testing.server import StandInJudge

ROWS = 150


def lines_of(path):
    data = path.read_bytes()
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


async def test_a_run_killed_mid_way_resumes_without_losing_or_repeating_a_row(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(ROWS))
    out = tmp_path / "out.jsonl"
    with StandInJudge(latency=0.2, idle_timeout=60) as server:
        command = [sys.executable, "-m", "reflection.batch._cli", "batch", str(source), "-o", str(out),
                   "--base-url", server.base_url, "--model", "stand-in", "--concurrency", "4", "--no-progress"]
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
