"""CPU per row of `reflection check --static-only`, split by stage, for valid and invalid rows.

Run by `bench_static.py` in a fresh process (cold caches and the collector's thresholds as a run
of `reflection check` has them):

    python _stages.py CORPUS.jsonl [--flat]

It does, row by row and in file order, what one worker does for a JSON Lines row
(`runner.static_line` of `inputs.jsonl_row`), each step between two reads of this thread's CPU
clock (`time.thread_time_ns`, about 0.2 us a read, 2 us a row in all):

- read: `inputs.jsonl_row` (the row split, its members parsed, the tool list left as text),
  `rows.row_id` and the `InputRow`;
- normalise tools: `formats.normalize_tools` and `static.prepare` (schemas compiled the first
  time a tool list is seen);
- normalise call: `formats.normalize_calls`;
- history: `formats.normalize_history`;
- checks: `static._evaluate` (the validators and the classification of their errors);
- findings and corrections: the rest of `static.check_call_data` (a failing call's findings, the
  corrected call and its re-check);
- grounding: `grounding.ground`;
- row: the result dicts and `results.output_row`;
- write: `rows.line_of` (JSON) and `OutputFile.write_line`.

Each row's line is compared with what `runner.static_line` writes for it (latency aside), so the
split cannot drift from the real code path. Rows are counted valid or invalid by their
`overall_valid`; error rows (unreadable lines) are left out. Prints one JSON object: for
"valid" and "invalid", the row count and the microseconds per row of each stage, and the whole
pass's process CPU.
"""

from __future__ import annotations

import gc
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STAGES = (
    "read",
    "normalise tools",
    "normalise call",
    "history",
    "checks",
    "findings and corrections",
    "grounding",
    "row",
    "write",
)

_LATENCY = re.compile(rb'"latency_ms":[0-9.e+-]+')


def main() -> None:
    from reflection._corrections import suggest_correction
    from reflection.batch._output import OutputFile
    from reflection.batch.inputs import jsonl_lines, jsonl_row
    from reflection.batch.runner import static_line
    from reflection.formats import normalize_calls, normalize_history, normalize_tools
    from reflection.pipeline import _NO_HISTORY, _NO_SEMANTIC, NO_JUDGE
    from reflection.rows import InputRow, line_of, read_row, row_id
    from reflection.static import MAX_FINDINGS, _evaluate, _omitted

    try:
        from reflection.formats import is_parallel
        from reflection.grounding import ground
        from reflection.results import ALL_PASSED, ZERO_USAGE, output_row
        from reflection.static import prepare
    except ImportError:  # a checkout from before issue 23 (bench_static.py --baseline, or PYTHONPATH)
        from reflection.grounding import _ground_data as ground
        from reflection.model import _ZERO_USAGE as ZERO_USAGE
        from reflection.pipeline import _is_parallel as is_parallel
        from reflection.rows import plain_row as output_row
        from reflection.static import _ALL_PASS_DATA as ALL_PASSED
        from reflection.static import _prepare as prepare

    try:  # the collector as a run sets it (a checkout from before issue 26 leaves it alone)
        from reflection.batch._workers import STATIC_GC_THRESHOLD
    except ImportError:
        pass
    else:
        gc.set_threshold(*STATIC_GC_THRESHOLD)
    corpus, flat = Path(sys.argv[1]), "--flat" in sys.argv[2:]
    grounding = not flat
    clock = time.thread_time_ns
    totals = {kind: dict.fromkeys(STAGES, 0) for kind in ("valid", "invalid")}
    counts = {"valid": 0, "invalid": 0, "error": 0}
    cpu_started = time.process_time()
    with tempfile.TemporaryDirectory() as work, OutputFile(Path(work) / "out.jsonl") as out:
        for number, text in jsonl_lines(corpus):
            spent = dict.fromkeys(STAGES, 0)
            t0 = clock()
            source = jsonl_row(number, text)
            if source is None:
                continue
            if source.error is not None:
                counts["error"] += 1
                continue
            rid = row_id(source.raw, number)
            try:
                row: InputRow = read_row(source.raw, number)
            except ValueError:
                counts["error"] += 1
                continue
            t1 = clock()
            spent["read"] = t1 - t0
            # pipeline.reflect_plain, step by step
            calls = normalize_calls(row.call)
            t2 = clock()
            inventory = normalize_tools(row.tools)
            t3 = clock()
            conversation = normalize_history(row.history) if grounding else _NO_HISTORY
            t4 = clock()
            spent["normalise call"] += t2 - t1
            spent["normalise tools"] += t3 - t2
            spent["history"] += t4 - t3
            parallel = is_parallel(row.call)
            results = []
            for one in calls if parallel else calls[:1]:
                t0 = clock()
                prepared = prepare(inventory)
                t1 = clock()
                failures, warnings = _evaluate(one, prepared)  # static.check_call_data from here
                t2 = clock()
                if not failures:
                    static: dict[str, Any] = {
                        "call": one,
                        "checks": ALL_PASSED,
                        "warnings": warnings,
                        "correction": None,
                        "correction_notes": (),
                        "valid": True,
                    }
                else:
                    correction, notes = suggest_correction(
                        one, failures, lambda c, prepared=prepared: _evaluate(c, prepared)[0]
                    )
                    checks = dict(ALL_PASSED)
                    for name, issues in failures.items():
                        findings = [issue.finding() for issue in issues[:MAX_FINDINGS]]
                        if len(issues) > MAX_FINDINGS:
                            findings.append(_omitted(name, len(issues) - MAX_FINDINGS))
                        checks[name] = {"passed": False, "findings": findings}
                    static = {
                        "call": one,
                        "checks": checks,
                        "warnings": warnings,
                        "correction": correction,
                        "correction_notes": tuple(notes),
                        "valid": False,
                    }
                t3 = clock()
                grounded: list[dict[str, Any]] = []
                if grounding and one.error is None:
                    tool = prepared.tools.get(one.name)
                    grounded = ground(one, conversation, tool[0] if tool is not None else None)
                t4 = clock()
                results.append(
                    {
                        "call": one,
                        "static": static,
                        "grounding": grounded,
                        "semantic": _NO_SEMANTIC,
                        "judge_skipped": NO_JUDGE,
                        "overall_valid": static["valid"],
                        "usage": ZERO_USAGE,
                        "warnings": static["warnings"] + conversation.problems,
                    }
                )
                t5 = clock()
                spent["normalise tools"] += t1 - t0
                spent["checks"] += t2 - t1
                spent["findings and corrections"] += t3 - t2
                spent["grounding"] += t4 - t3
                spent["row"] += t5 - t4
            t0 = clock()
            output = output_row(rid, results if parallel else results[0], latency_ms=0.0, flat_only=flat)
            t1 = clock()
            summary, line = line_of(output)
            out.write_line(line)
            t2 = clock()
            spent["row"] += t1 - t0
            spent["write"] += t2 - t1
            expected = static_line(row, flat)[1]
            if _LATENCY.sub(b"", line) != _LATENCY.sub(b"", expected):
                raise AssertionError(
                    f"line {number}: the staged row differs from runner.static_line's:\n"
                    f"{line[:300]!r}\n{expected[:300]!r}"
                )
            kind = "valid" if summary["overall_valid"] else "invalid"
            counts[kind] += 1
            for stage, ns in spent.items():
                totals[kind][stage] += ns
    cpu = time.process_time() - cpu_started
    report: dict[str, Any] = {"cpu_seconds": cpu, "errors": counts["error"]}
    for kind, stages in totals.items():
        n = max(1, counts[kind])
        report[kind] = {"rows": counts[kind], "us": {stage: ns / n / 1000 for stage, ns in stages.items()}}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
