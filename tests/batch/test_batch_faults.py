"""Against a judge that fails 20% of requests in mixed ways: every row exactly once, no wrong verdicts.

The stand-in server injects 429s, 500s, timeouts, non-JSON replies and out-of-range scores.
A row whose judge failed after retries must be unknown (None) with the reason in the row;
it must never get a verdict the input does not support. Two attempts per request, so some
rows do run out of retries (about 4% of judged rows).
"""

from collections import Counter

import pytest

from reflection.batch import read_report, run_batch
from reflection.batch._output import iter_output_rows
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.batch.report import row_problems
from reflection.config import ReflectionConfig
from reflection.judge import JudgeConfig
from reflection.testing.server import FAULT_KINDS, StandInJudge

ROWS = 300


def flaky_config(server, attempts):
    return ReflectionConfig(
        judge=JudgeConfig(
            base_url=server.base_url,
            model="stand-in",
            timeout=0.5,
            max_attempts=attempts,
            retry_max_wait=0.02,
        )
    )


def allowed(kind):
    """The verdicts a correct reflection may give each kind of synthetic row."""
    return {"valid": {True, None}, "ungrounded": {False, None}, "static_invalid": {False}}[kind]


@pytest.fixture
def dataset(tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(ROWS))
    with path.open("a") as f:
        f.write("{broken json\n")
    return path


async def test_with_20_percent_faults_every_row_appears_once_with_no_wrong_verdict(tmp_path, dataset):
    with StandInJudge(fault_rate=0.2, timeout_delay=1.0, seed=7, idle_timeout=30) as server:
        stats = await run_batch(
            dataset, tmp_path / "out.jsonl", config=flaky_config(server, 2), concurrency=32, cache=False
        )
        faults = dict(server.fault_counts)
    rows = list(iter_output_rows(tmp_path / "out.jsonl"))
    ids = [r["id"] for r in rows]
    expected = [r["id"] for r in synthetic_rows(ROWS)] + [f"line-{ROWS + 1}"]
    assert sorted(ids) == sorted(expected) and stats.written == len(expected)

    counts = Counter()
    for row in rows:
        if "error" in row:
            assert row["id"] == f"line-{ROWS + 1}" and "not valid JSON" in row["error"]
            counts["error"] += 1
            continue
        kind = row["id"].rsplit("-", 1)[0]
        assert row["overall_valid"] in allowed(kind), row
        counts[{True: "valid", False: "invalid", None: "unknown"}[row["overall_valid"]]] += 1
        if row["overall_valid"] is None:
            reasons = row_problems(row)
            assert reasons and all("after 2 request(s)" in r for r in reasons), reasons
    report = read_report(tmp_path / "out.jsonl")
    assert (report.valid, report.invalid, report.unknown, report.error) == (
        counts["valid"],
        counts["invalid"],
        counts["unknown"],
        counts["error"],
    )
    assert set(faults) == set(FAULT_KINDS)  # every kind of fault was injected
    assert report.judge.requests > 200  # retries happened (200 rows reach the judge)
    print(
        f"\nfault test: {ROWS + 1} rows -> valid {counts['valid']}, invalid {counts['invalid']}, "
        f"unknown {counts['unknown']}, error {counts['error']}; judge requests {report.judge.requests}; "
        f"injected faults {faults}"
    )


async def test_when_every_request_fails_judged_rows_are_unknown_with_the_reason(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(12))
    with StandInJudge(fault_rate=1.0, faults=("500", "non_json"), seed=1) as server:
        await run_batch(source, tmp_path / "out.jsonl", config=flaky_config(server, 3), concurrency=4, cache=False)
    rows = {r["id"]: r for r in iter_output_rows(tmp_path / "out.jsonl")}
    assert len(rows) == 12
    for rid, row in rows.items():
        if rid.startswith("static_invalid"):
            assert row["overall_valid"] is False  # decided before the judge: still a verdict
        else:
            assert row["overall_valid"] is None
            [reason] = {r.split(": ", 1)[1] for r in row_problems(row)}
            assert reason.endswith("(after 3 request(s))")
            assert reason.startswith(("HTTP 500 from the judge endpoint", "the judge reply was not valid JSON"))
