"""The report: means over rows where a key is present, verdict counts, failing checks, errors, judge, latency."""

import json

from rich.console import Console

from reflection.batch import build_report, read_report, render_report


def row(rid, valid, latency=None, usage=None, semantic=None, **flat):
    out = {
        "id": rid,
        "overall_valid": valid,
        **flat,
        "judge_skipped": None,
        "warnings": [],
        "usage": usage
        or {
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
            "cost_usd": 0.0,
            "prompt_chars": 0,
        },
        "latency_ms": latency,
        "results": [{"semantic": semantic or {}}],
    }
    return out


ROWS = [
    row(
        "a",
        True,
        10.0,
        static_missing_required_parameter=1.0,
        semantic_general_hallucination_check=1.0,
        usage={"requests": 1, "prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 0, "cost_usd": 0.5},
        semantic={"general_hallucination_check": {"status": "passed"}},
    ),
    row("b", False, 20.0, static_missing_required_parameter=0.0),
    row(
        "c",
        False,
        30.0,
        static_missing_required_parameter=1.0,
        semantic_general_hallucination_check=0.25,
        usage={"requests": 3, "prompt_tokens": 300, "completion_tokens": 30, "cached_tokens": 50, "cost_usd": 1.5},
        semantic={"general_hallucination_check": {"status": "failed"}},
    ),
    row(
        "d",
        None,
        40.0,
        static_missing_required_parameter=1.0,
        semantic={
            "general_hallucination_check": {
                "status": "error",
                "error": "HTTP 500 from the judge endpoint (after 4 request(s))",
            }
        },
    ),
    {"id": "e", "overall_valid": None, "error": 'row e: no "call" or "tool_calls" field'},
    row("f", False, 50.0, static_missing_required_parameter=0.0),
]


def test_means_are_over_the_rows_where_each_key_is_present():
    report = build_report(ROWS)
    assert report.means["static_missing_required_parameter"] == 3 / 5
    assert report.present["static_missing_required_parameter"] == 5
    assert report.means["semantic_general_hallucination_check"] == (1.0 + 0.25) / 2
    assert report.present["semantic_general_hallucination_check"] == 2
    assert report.means["overall_valid"] == 1 / 4
    assert list(report.means)[0] == "overall_valid"


def test_rows_are_counted_valid_invalid_unknown_and_error():
    report = build_report(ROWS)
    assert (report.rows, report.valid, report.invalid, report.unknown, report.error) == (6, 1, 3, 1, 1)


def test_top_failing_checks_come_with_example_ids():
    report = build_report(ROWS)
    assert [(c.check, c.rows, c.example_ids) for c in report.top_failing_checks] == [
        ("static_missing_required_parameter", 2, ["b", "f"]),
        ("semantic_general_hallucination_check", 1, ["c"]),
    ]


def test_error_reasons_group_messages_that_differ_only_in_numbers_and_row_ids():
    report = build_report(
        ROWS
        + [
            row(
                "g",
                None,
                1.0,
                semantic={
                    "general_hallucination_check": {
                        "status": "error",
                        "error": "HTTP 500 from the judge endpoint (after 2 request(s))",
                    }
                },
            )
        ]
    )
    reasons = {r.reason: (r.rows, r.example_ids) for r in report.error_reasons}
    assert reasons["general_hallucination_check: HTTP 500 from the judge endpoint (after N request(s))"] == (
        2,
        ["d", "g"],
    )
    assert reasons['no "call" or "tool_calls" field'] == (1, ["e"])


def test_judge_totals_and_latency_percentiles():
    report = build_report(ROWS)
    assert report.judge.model_dump() == {
        "requests": 4,
        "prompt_tokens": 400,
        "completion_tokens": 40,
        "cached_tokens": 50,
        "cost_usd": 2.0,
    }
    assert report.latency_ms.rows == 5
    assert report.latency_ms.p50 == 30.0
    assert report.latency_ms.p95 == 48.0  # linear between the 4th and 5th of 10..50
    assert report.latency_ms.max == 50.0


def test_an_empty_output_gives_an_empty_report():
    report = build_report([])
    assert (report.rows, report.means, report.latency_ms.p50) == (0, {}, None)


def test_text_report_shows_counts_tables_and_judge_line(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    console = Console(record=True, width=140)
    render_report(read_report(path), console)
    text = console.export_text()
    assert "6 rows: 1 (16.7%) valid, 3 (50.0%) invalid, 1 (16.7%) unknown, 1 (16.7%) error" in text
    assert "static_missing_required_parameter" in text and "b, f" in text
    assert "judge: 4 requests, 400 prompt + 40 completion tokens (50 cached), $2.0000" in text
    assert "latency per row: p50 30.0 ms, p95 48.0 ms" in text
