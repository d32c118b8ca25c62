"""Peak memory of a static-only batch (issue target: 100,000 rows under 300 MB peak RSS).

Runs `reflection batch --static-only` in a child process over ROWS synthetic rows and over
ROWS / 100 rows, side by side; each child reports its own peak RSS (VmHWM) as it exits, so
the figure is the whole command: reading, reflecting, writing, and the closing report.
(`ru_maxrss` from wait4 would also count this parent's memory at fork time, which Linux
carries over the exec.) Memory that grows with the row count shows as a ratio above 1.

    python benchmarks/bench_batch_memory.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reflection.batch._synthetic import synthetic_rows, write_jsonl

BUDGET_MB = 300


# The batch command, reporting its own high-water RSS on the way out.
_CHILD = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                sys.stderr.write(f"PEAK_RSS_KB {line.split()[1]}\\n")
atexit.register(_peak)
from reflection.cli import app
app()
"""


def run(source: Path, output: Path) -> tuple[float, float]:
    """Peak RSS (MB) and wall time of one batch command."""
    started = time.perf_counter()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            "batch",
            str(source),
            "-o",
            str(output),
            "--static-only",
            "--no-progress",
            "--json-report",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise SystemExit(f"batch failed ({child.returncode}): {child.stderr}")
    peak = [line for line in child.stderr.splitlines() if line.startswith("PEAK_RSS_KB ")]
    if not peak:
        raise SystemExit("the child did not report its peak RSS (no /proc/self/status?)")
    return int(peak[-1].split()[1]) / 1024, time.perf_counter() - started


def main(rows: int) -> None:
    small = max(1, rows // 100)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        big_in = write_jsonl(work / "big.jsonl", synthetic_rows(rows))
        small_in = write_jsonl(work / "small.jsonl", synthetic_rows(small))
        small_mb, small_s = run(small_in, work / "small.out.jsonl")
        big_mb, big_s = run(big_in, work / "big.out.jsonl")
        out_mb = (work / "big.out.jsonl").stat().st_size / 2**20
        in_mb = big_in.stat().st_size / 2**20
    print(
        f"static-only batch, peak RSS of the whole command (input {in_mb:,.0f} MB, output {out_mb:,.0f} MB at {rows:,} rows)"
    )
    print(f"{'rows':>9} {'peak RSS MB':>12} {'wall s':>8} {'rows/s':>9}")
    print(f"{small:>9,} {small_mb:>12.1f} {small_s:>8.1f} {small / small_s:>9,.0f}")
    print(f"{rows:>9,} {big_mb:>12.1f} {big_s:>8.1f} {rows / big_s:>9,.0f}")
    print(
        f"peak RSS ratio {rows:,} / {small:,} rows: {big_mb / small_mb:.2f}; "
        f"budget {BUDGET_MB} MB: {big_mb / BUDGET_MB:.2f} of it"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    main(args.rows)
