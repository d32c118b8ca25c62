"""Batch throughput against the stand-in judge (issue target: within 1.15x the ideal time).

Starts `python -m reflection.testing.server --latency L` as a separate process, so the
judge's CPU is not the client's, writes ROWS synthetic rows that each need exactly one judge
request (combined mode; half valid, half with an ungrounded value), and runs `run_batch`
with CONCURRENCY. Ideal time = rows x requests per row x latency / concurrency.

Side by side in one run (the cache is off except where said):
  batch         what `reflection batch` does: the judge's connections spread over small
                httpx pools (reflection/judge/transport.py), the default client of every Judge
  one pool      an `httpx.AsyncClient` with one pool of all the connections, passed as
                http_client; httpcore 1.0's pool costs CPU quadratic in its size
  cold cache    the batch run again with a fresh SQLite judge cache (fills it)
  warm cache    a rerun of the finished batch into a new output: zero judge requests
  bare client   no reflection at all: the judge's default client (reflection/judge/transport.py) posts
                ROWS judge requests captured from the warm-up, CONCURRENCY at a time, and
                parses each reply; the floor any httpx-based client sets on this machine

For each: wall time, ratio to the ideal, client CPU per row, and the stand-in judge's own
CPU per request (it shares the machine's cores with the client). When client CPU x rows is
above the ideal time the run is CPU-bound: no scheduling can reach the ideal on one core.

    python benchmarks/bench_batch.py [--rows 5000] [--concurrency 64] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Measure the checkout this script lives in, not whichever copy of the package is installed.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import httpx  # noqa: E402
import orjson  # noqa: E402

from reflection.batch import read_report, run_batch  # noqa: E402
from reflection.batch._synthetic import synthetic_rows, write_jsonl  # noqa: E402
from reflection.config import ReflectionConfig  # noqa: E402
from reflection.judge import JudgeConfig  # noqa: E402
from reflection.judge.transport import judge_http_client  # noqa: E402


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    server = subprocess.Popen(
        [sys.executable, "-m", "reflection.testing.server", "--latency", str(latency), "--idle-timeout", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def judge_cpu(pid: int) -> float:
    """CPU seconds the stand-in judge process has used so far (0.0 where /proc is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def timed_run(
    source: Path,
    output: Path,
    config: ReflectionConfig,
    concurrency: int,
    *,
    cache: bool,
    cache_path: Path | None = None,
    http_client: object = None,
) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    stats = await run_batch(
        source,
        output,
        config=config,
        concurrency=concurrency,
        cache=cache,
        cache_path=cache_path,
        http_client=http_client,
    )
    return time.perf_counter() - wall, time.process_time() - cpu, stats.judge_requests


async def bare_client(
    url: str, bodies: list[bytes], rows: int, concurrency: int, timeout: float
) -> tuple[float, float, int]:
    """Post `rows` captured judge requests, `concurrency` at a time, with no reflection around them."""
    headers = {"Content-Type": "application/json", "Authorization": "Bearer none"}
    async with judge_http_client(concurrency, timeout) as client:

        async def worker(share: range) -> None:
            for i in share:
                response = await client.post(url, content=bodies[i % len(bodies)], headers=headers)
                response.raise_for_status()
                orjson.loads(response.content)

        wall, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for k in range(concurrency):
                tg.start_soon(worker, range(k, rows, concurrency))
        return time.perf_counter() - wall, time.process_time() - cpu, rows


async def main(rows: int, concurrency: int, latency: float) -> None:
    server, base_url = start_server(latency)
    try:
        config = ReflectionConfig(judge=JudgeConfig(base_url=base_url, model="stand-in"))
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            source = write_jsonl(work / "in.jsonl", synthetic_rows(rows, ("valid", "ungrounded")))
            warmup = write_jsonl(work / "warmup.jsonl", synthetic_rows(2 * concurrency, ("valid",)))
            bodies: list[bytes] = []

            async def capture(request: httpx.Request) -> None:
                bodies.append(request.content)

            async with judge_http_client(concurrency, config.judge.timeout) as capturing:
                capturing.event_hooks["request"] = [capture]
                await run_batch(
                    warmup,
                    work / "warmup.out.jsonl",
                    config=config,
                    concurrency=concurrency,
                    cache=False,
                    http_client=capturing,
                )

            ideal = rows * 1 * latency / concurrency
            print(
                f"batch throughput: {rows:,} rows x 1 request/row, judge latency {latency * 1000:.0f} ms, "
                f"concurrency {concurrency}; ideal {ideal:.2f} s"
            )
            print(
                f"{'run':<12} {'requests':>9} {'wall s':>8} {'x ideal':>8} {'client CPU ms/row':>18} "
                f"{'CPU-bound floor s':>18} {'judge CPU ms/req':>17}"
            )
            judge_mark = [judge_cpu(server.pid)]

            def line(name: str, wall: float, cpu: float, requests: int) -> None:
                judge = judge_cpu(server.pid)
                per_request = (
                    f"{(judge - judge_mark[0]) / requests * 1000:>17.3f}" if requests and judge else f"{'-':>17}"
                )
                judge_mark[0] = judge
                print(
                    f"{name:<12} {requests:>9,} {wall:>8.2f} {wall / ideal:>8.2f} {cpu / rows * 1000:>18.3f} "
                    f"{cpu:>18.2f} {per_request}"
                )

            out = work / "batch.jsonl"
            wall, cpu, requests = await timed_run(source, out, config, concurrency, cache=False)
            report = read_report(out)
            assert report.rows == rows and requests == rows, (report.rows, requests)
            line("batch", wall, cpu, requests)

            async with httpx.AsyncClient(
                timeout=httpx.Timeout(config.judge.timeout),
                limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            ) as one_pool:
                wall, cpu, requests = await timed_run(
                    source, work / "one-pool.jsonl", config, concurrency, cache=False, http_client=one_pool
                )
            line("one pool", wall, cpu, requests)

            cache_file = work / "cache.sqlite"
            wall, cpu, requests = await timed_run(
                source, work / "cold.jsonl", config, concurrency, cache=True, cache_path=cache_file
            )
            line("cold cache", wall, cpu, requests)
            wall, cpu, requests = await timed_run(
                source, work / "warm.jsonl", config, concurrency, cache=True, cache_path=cache_file
            )
            assert requests == 0, requests
            line("warm cache", wall, cpu, requests)
            line(
                "bare client",
                *await bare_client(f"{base_url}/chat/completions", bodies, rows, concurrency, config.judge.timeout),
            )
            print(
                f"latency per row (batch run): p50 {report.latency_ms.p50:.1f} ms, p95 {report.latency_ms.p95:.1f} ms"
            )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    anyio.run(main, args.rows, args.concurrency, args.latency)
