"""ALTK's static checker over a JSON Lines corpus, timed in its own environment.

Run by `bench_static.py` with the Python of a separate virtual environment that has
`agent-lifecycle-toolkit` installed (see benchmarks/README.md); it never imports reflection.

    python _altk_leg.py CORPUS.jsonl OUT.jsonl

Each input line is `{"id", "tools": [OpenAI tools], "call": OpenAI tool call}`. Per row, as an
agent using ALTK would: parse the line, build ALTK's `ToolSpec`s and `ToolCall` (pydantic,
validated), run `evaluate_static`, and write `{"id", "valid", "result"}` as one JSON line.
Prints one JSON object: rows, checked, valid, seconds (wall) and cpu_seconds of the loop, and p50/p99 of the per-call
`evaluate_static` time (microseconds) in file order.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from altk.pre_tool.sparc.function_calling.pipeline.static_checker import evaluate_static
    from altk.pre_tool.sparc.function_calling.pipeline.types import ToolCall, ToolSpec

    corpus, out_path = sys.argv[1], sys.argv[2]
    with open(corpus, "rb") as f:
        lines = f.read().splitlines()
    timings: list[float] = []
    rows = checked = valid = 0
    clock = time.perf_counter
    started, cpu_started = clock(), time.process_time()
    with open(out_path, "w", encoding="utf-8") as out:
        for line in lines:
            rows += 1
            try:
                row = json.loads(line)
                specs = [ToolSpec.model_validate(tool) for tool in row["tools"]]
                call = ToolCall.model_validate(row["call"])
            except Exception as exc:  # noqa: BLE001 - a row ALTK cannot take is an error row, as in reflection
                out.write(json.dumps({"id": None, "error": f"{type(exc).__name__}"}) + "\n")
                continue
            t0 = clock()
            result = evaluate_static(specs, call)
            timings.append(clock() - t0)
            checked += 1
            valid += bool(result.final_decision)
            out.write(
                json.dumps({"id": row["id"], "valid": result.final_decision, "result": result.model_dump(mode="json")})
                + "\n"
            )
    seconds, cpu_seconds = clock() - started, time.process_time() - cpu_started
    timings.sort()

    def pct(q: float) -> float:
        return timings[min(len(timings) - 1, int(q * len(timings)))] * 1e6 if timings else 0.0

    print(
        json.dumps(
            {
                "rows": rows,
                "checked": checked,
                "valid": valid,
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "p50_us": pct(0.50),
                "p99_us": pct(0.99),
            }
        )
    )


if __name__ == "__main__":
    main()
