"""The batch report: one streaming pass over output rows, as a text table or JSON.

It gives the mean of every flat key over the rows where the key is present (the
unitxt-style reduce), counts of valid / invalid / unknown / error rows, the checks that
fail most with example ids, the commonest error reasons, judge traffic and cost, and
latency percentiles.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table
from rich.text import Text

from reflection._text import shorten, terminal_safe
from reflection.batch._output import iter_output_rows, semantic_checks
from reflection.errors import NotAResultRow

__all__ = [
    "BatchReport",
    "ErrorReason",
    "FailingCheck",
    "ReportBuilder",
    "failed_checks",
    "format_cost",
    "format_share",
    "percentile",
    "read_report",
    "render_report",
    "row_problems",
]

_EXAMPLES = 3
_VALIDITY: dict[Any, str] = {True: "valid", False: "invalid"}
"""The count an `overall_valid` value adds to; another value (null) counts as "unknown"."""
_TOP = 10
_USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FailingCheck(_Frozen):
    """A check and how many rows fail it, with a few of their ids."""

    check: str
    """The flat key of the check: `static_<check>` or `semantic_<check>`."""
    rows: int
    example_ids: list[str]


class ErrorReason(_Frozen):
    """A reason rows could not be (fully) reflected, with how often it occurred."""

    reason: str
    rows: int
    example_ids: list[str]


class JudgeTotals(_Frozen):
    """Judge traffic summed over the rows."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = 0.0
    """USD; None (null) when some row's judge requests have no known price."""


class Latency(_Frozen):
    """Per-row wall time in milliseconds (rows that were reflected; error rows have none)."""

    rows: int = 0
    p50: float | None = None
    p95: float | None = None
    max: float | None = None


class BatchReport(_Frozen):
    """The summary of a batch output file (`reflection report OUTPUT --json` prints this)."""

    rows: int
    valid: int
    invalid: int
    unknown: int
    error: int
    judge_skipped: int
    """Rows where the judge did not run (no judge configured, or the static stage failed)."""
    means: dict[str, float]
    """Mean of each flat key over the rows where it is present."""
    present: dict[str, int]
    """How many rows each flat key was present in."""
    top_failing_checks: list[FailingCheck]
    error_reasons: list[ErrorReason]
    judge: JudgeTotals
    latency_ms: Latency


def _is_flat_key(key: str, value: Any) -> bool:
    return key.startswith(("static_", "semantic_")) and isinstance(value, (int, float)) and not isinstance(value, bool)


_ROW_PREFIX = re.compile(r"^row .*?: ")
_NUMBERS = re.compile(r"(?<!HTTP )(?<!\d)\d+")


def _reason_key(message: str) -> str:
    """Group messages that differ only in row ids or numbers; HTTP statuses stay as they are."""
    text = _NUMBERS.sub("N", _ROW_PREFIX.sub("", message.strip()))
    return shorten(text, 160)


def row_problems(row: Mapping[str, Any]) -> list[str]:
    """Why a row is an error row or lacks a judge answer: its `error`, else the error of
    each judge check that could not be answered (after retries). Empty for a clean row."""
    if row.get("error"):
        return [str(row["error"])]
    return [
        f"{name}: {check.get('error') or 'judge error'}"
        for name, check in semantic_checks(row)
        if check.get("status") == "error"
    ]


def row_usage(row: Mapping[str, Any]) -> dict[str, float | None]:
    """The row's judge usage as numbers (missing fields are 0; a null `cost_usd`, an unknown
    price, stays None); ValueError names the row when
    `usage` is not an object of numbers, so the file is not a reflection output."""
    usage = row.get("usage")
    if usage is None:
        return {}
    bad = not isinstance(usage, Mapping) or any(
        isinstance(v, bool) or not isinstance(v, (int, float, type(None))) for v in usage.values()
    )
    if bad:
        raise ValueError(
            f'row {str(row.get("id"))!r}: "usage" must be an object of numbers, got '
            f"{terminal_safe(repr(usage), one_line=True)[:80]}; this is not a reflection output row"
        )
    return {k: v if k == "cost_usd" else v or 0 for k, v in usage.items()}  # a null cost stays unknown


def failed_checks(row: Mapping[str, Any]) -> list[str]:
    """The checks a result row failed: its `static_*` flat keys at 0, then its failed semantic
    checks (`semantic_<name>`), sorted."""
    failed = [key for key, value in row.items() if key.startswith("static_") and value == 0.0]
    semantic = {f"semantic_{name}" for name, check in semantic_checks(row) if check.get("status") == "failed"}
    return failed + sorted(semantic)


class ReportBuilder:
    """Accumulates rows one at a time; memory grows only with the number of latencies (8 bytes a row)."""

    def __init__(self) -> None:
        self.counts = Counter[str]()
        self.sums: dict[str, float] = {}
        self.present = Counter[str]()
        self.failures = Counter[str]()
        self.failure_examples: dict[str, list[str]] = {}
        self.reasons = Counter[str]()
        self.reason_examples: dict[str, list[str]] = {}
        self.usage = dict.fromkeys(_USAGE_FIELDS, 0)
        self.cost: float | None = 0.0  # None once a row's requests have no known price
        self.latencies = array("d")

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row; `NotAResultRow` (a ValueError) for a row that is not one."""
        if "overall_valid" not in row:  # every result row has it, error rows and --flat rows too
            raise NotAResultRow(row)
        rid = str(row.get("id"))
        self.counts["rows"] += 1
        if "error" in row:
            self.counts["error"] += 1
        else:
            self.counts[_VALIDITY.get(row.get("overall_valid"), "unknown")] += 1
        if row.get("judge_skipped"):
            self.counts["judge_skipped"] += 1
        for key, value in row.items():
            if _is_flat_key(key, value):
                self.sums[key] = self.sums.get(key, 0.0) + value
                self.present[key] += 1
        if isinstance(row.get("overall_valid"), bool):
            self.sums["overall_valid"] = self.sums.get("overall_valid", 0.0) + float(row["overall_valid"])
            self.present["overall_valid"] += 1
        for check in failed_checks(row):
            self.failures[check] += 1
            examples = self.failure_examples.setdefault(check, [])
            if len(examples) < _EXAMPLES:
                examples.append(rid)
        for reason in {_reason_key(r) for r in row_problems(row)}:
            self.reasons[reason] += 1
            examples = self.reason_examples.setdefault(reason, [])
            if len(examples) < _EXAMPLES:
                examples.append(rid)
        usage = row_usage(row)
        for name in _USAGE_FIELDS:
            self.usage[name] += int(usage.get(name) or 0)
        if self.cost is not None:
            cost = usage.get("cost_usd", 0.0)
            self.cost = None if cost is None and usage.get("requests") else self.cost + float(cost or 0.0)
        if isinstance(row.get("latency_ms"), (int, float)):
            self.latencies.append(float(row["latency_ms"]))

    def build(self) -> BatchReport:
        """The report over every row added so far."""
        ordered = sorted(self.sums, key=lambda k: (k != "overall_valid", not k.startswith("static_"), k))
        latencies = sorted(self.latencies)
        return BatchReport(
            rows=self.counts["rows"],
            valid=self.counts["valid"],
            invalid=self.counts["invalid"],
            unknown=self.counts["unknown"],
            error=self.counts["error"],
            judge_skipped=self.counts["judge_skipped"],
            means={key: self.sums[key] / self.present[key] for key in ordered},
            present={key: self.present[key] for key in ordered},
            top_failing_checks=[
                FailingCheck(check=check, rows=n, example_ids=self.failure_examples[check])
                for check, n in self.failures.most_common(_TOP)
            ],
            error_reasons=[
                ErrorReason(reason=reason, rows=n, example_ids=self.reason_examples[reason])
                for reason, n in self.reasons.most_common(_TOP)
            ],
            judge=JudgeTotals(**self.usage, cost_usd=self.cost),
            latency_ms=Latency(
                rows=len(latencies),
                p50=percentile(latencies, 0.50),
                p95=percentile(latencies, 0.95),
                max=latencies[-1] if latencies else None,
            ),
        )


def percentile(ordered: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not ordered:
        return None
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def build_report(rows: Iterable[Mapping[str, Any]]) -> BatchReport:
    """The report over `rows`."""
    builder = ReportBuilder()
    for row in rows:
        builder.add(row)
    return builder.build()


def read_report(path: str | Path) -> BatchReport:
    """The report over a batch output file, read as a stream. ValueError (`NotAResultRow`) when
    a row is not a result row: a dataset given instead of the results reflected from it."""
    try:
        return build_report(iter_output_rows(path))
    except NotAResultRow as exc:
        raise NotAResultRow(exc.row, path) from None


def _untrusted(text: str) -> Text:
    """Ids and error messages come from the input: shown as plain text, never as markup or control codes."""
    return Text(terminal_safe(text, one_line=True))


def format_cost(usd: float | None) -> str:
    """A judge cost for people: `$0.0123`, or `unknown` when no price is known for the model."""
    return "unknown" if usd is None else f"${usd:,.4f}"


def format_share(part: int, whole: int, decimals: int = 0) -> str:
    """`part` of `whole` as a percentage for people: never "0%" for a non-zero part nor "100%"
    for less than the whole (1 in 601 is "<1%", 600 in 601 is ">99%")."""
    if whole <= 0:
        return "-"
    text = f"{part / whole:.{decimals}%}"
    zero, full = f"{0:.{decimals}%}", f"{1:.{decimals}%}"
    step = f"{10.0**-decimals:.{decimals}f}"
    if part > 0 and text == zero:
        return f"<{step}%"
    if part < whole and text == full:
        return f">{100 - 10.0**-decimals:.{decimals}f}%"
    return text


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def render_report(report: BatchReport, console: Console | None = None) -> None:
    """Print the report as text tables."""
    console = console or Console()
    n = report.rows

    def share(k: int) -> str:
        return f"{k:,} ({format_share(k, n, 1)})" if n else "0"

    console.print(
        f"[bold]{n:,} rows[/bold]: {share(report.valid)} valid, {share(report.invalid)} invalid, "
        f"{share(report.unknown)} unknown, {share(report.error)} error"
        + (f"; judge skipped on {report.judge_skipped:,}" if report.judge_skipped else "")
    )

    if report.means:
        means = Table(title="Mean of each flat key (over rows where present)", title_justify="left")
        means.add_column("key")
        means.add_column("mean", justify="right")
        means.add_column("rows", justify="right")
        for key, mean in report.means.items():
            means.add_row(_untrusted(key), f"{mean:.3f}", f"{report.present[key]:,}")
        console.print(means)

    if report.top_failing_checks:
        failing = Table(title="Top failing checks", title_justify="left")
        failing.add_column("check")
        failing.add_column("rows", justify="right")
        failing.add_column("example ids")
        for item in report.top_failing_checks:
            failing.add_row(_untrusted(item.check), f"{item.rows:,}", _untrusted(", ".join(item.example_ids)))
        console.print(failing)

    if report.error_reasons:
        errors = Table(title="Errors (error rows and judge checks that failed after retries)", title_justify="left")
        errors.add_column("reason")
        errors.add_column("rows", justify="right")
        errors.add_column("example ids")
        for entry in report.error_reasons:
            errors.add_row(_untrusted(entry.reason), f"{entry.rows:,}", _untrusted(", ".join(entry.example_ids)))
        console.print(errors)

    judge = report.judge
    console.print(
        f"judge: {judge.requests:,} requests, {judge.prompt_tokens:,} prompt + "
        f"{judge.completion_tokens:,} completion tokens ({judge.cached_tokens:,} cached), "
        + (
            "cost unknown (no price for the judge model: set judge.prices in the config)"
            if judge.cost_usd is None
            else format_cost(judge.cost_usd)
        ),
        markup=False,
    )
    latency = report.latency_ms
    console.print(
        f"latency per row: p50 {_fmt_ms(latency.p50)}, p95 {_fmt_ms(latency.p95)}, "
        f"max {_fmt_ms(latency.max)} over {latency.rows:,} rows"
    )
