"""Self-contained HTML reports: `reflection report OUT --html FILE` and `reflection score ... --html FILE`.

One file with everything inline (CSS, a few lines of JavaScript, SVG charts), and a Content
Security Policy that forbids every network request, so it opens offline and can be mailed or
attached to a CI run. It holds a summary table, a bar chart of the failure rate per check (or
per metric), the distribution of each score, judge cost and latency percentiles, and the
failing rows with their proposed calls, corrections, findings, evidence and explanations,
filterable by check.

Rows are filtered before they are capped: the page lists the first `MAX_ROWS` failing rows,
and, for each check, the first `MAX_ROWS` rows failing it, so a check that fails only on row
601 still lists that row under its filter; every view says how many rows it does not list.

Everything from the rows (ids, check names, tool names, arguments, messages, evidence, judge
explanations) is untrusted: it is HTML-escaped where it is written, and reaches the page only
as text. The builders read rows one at a time and keep at most `MAX_KEPT` failing rows in memory.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflection._json import dumps
from reflection._text import shorten
from reflection.batch.report import (
    ReportBuilder,
    failed_checks,
    format_cost,
    format_share,
    percentile,
    row_problems,
)

__all__ = ["MAX_KEPT", "MAX_ROWS", "BatchHtmlReport", "ScoreHtmlReport", "batch_report_html", "write_html"]

MAX_ROWS = 500
"""Failing rows listed per view (all checks, and each check's filter); the rest are counted."""
MAX_KEPT = 20 * MAX_ROWS
"""Failing rows kept in memory over every view: a file with thousands of distinct failing
check keys cannot make the page (or the builder) grow without bound. Counts stay exact."""
_QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))
_CELL = 200  # characters of one value in a failing row's details


def _e(value: Any) -> str:
    """Text for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)


@dataclass
class _Row:
    """A failing row as the page lists it."""

    rid: str
    label: str
    """Short status: "invalid", "error", or the tools for a score row."""
    details: list[tuple[str, str, list[str]]]
    """(check, message, evidence quotes) lines."""
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, text, note) lines: each proposed call, then its correction or the judge's suggestion."""
    in_all: bool = False
    """Listed when no check is chosen (one of the first `MAX_ROWS` failing rows)."""
    listed: list[str] = field(default_factory=list)
    """The checks (or metrics) under whose filter the row is listed: those it fails that had
    fewer than `MAX_ROWS` rows listed before it. The filter keys of its table row."""


class _Listing:
    """The failing rows a page lists, filtered before they are capped, and how many there are."""

    def __init__(self) -> None:
        self.rows: list[_Row] = []
        self.total = 0
        """Failing rows seen."""
        self.in_all = 0
        self.by_check: Counter[str] = Counter()
        """Failing rows seen per check."""
        self.listed: Counter[str] = Counter()
        """Rows listed per check."""

    def add(self, checks: list[str], make: Callable[[], _Row]) -> None:
        """Count one failing row; keep it (built by `make`) if some view still lists it."""
        checks = list(dict.fromkeys(checks))
        self.total += 1
        self.by_check.update(checks)
        in_all = self.in_all < MAX_ROWS
        listed = [check for check in checks if self.listed[check] < MAX_ROWS]
        if not (in_all or listed) or len(self.rows) >= MAX_KEPT:
            return
        self.in_all += in_all
        self.listed.update(listed)
        row = make()
        row.in_all, row.listed = in_all, listed
        self.rows.append(row)

    def note(self, check: str | None = None, name: str = "") -> str:
        """What a view lists, and how many rows it does not."""
        if check is None:
            total, listed = self.total, self.in_all
            what = "failing row" if total == 1 else "failing rows"
        else:
            total, listed = self.by_check[check], self.listed[check]
            rows = "row" if total == 1 else "rows"
            what = {"error": f"error {rows}", "judge_error": f"{rows} with a judge error"}.get(
                check, f"{rows} failing {name or check}"
            )
        if total == 0:
            return f"No {what}."
        if listed == total:
            return f"Showing {'the' if total == 1 else 'all'} {total:,} {what}."
        hint = " Choose a check (or click its name in the chart) for its own rows." if check is None else ""
        return (
            f"Showing the first {listed:,} of {total:,} {what}; {total - listed:,} more "
            f"{'is' if total - listed == 1 else 'are'} counted but not listed (at most {MAX_ROWS:,} per view)." + hint
        )


@dataclass
class _Page:
    """What the page shows, whatever kind of report it is."""

    title: str
    source: str
    cards: list[tuple[str, str, str]]
    """(label, value, tone) with tone one of "", "good", "bad", "warn"."""
    table_title: str
    table_head: tuple[str, ...]
    table: list[tuple[str, ...]]
    bars_title: str
    bars: list[tuple[str, int, int]]
    """(check, failed, rows)."""
    distributions_title: str
    distributions: list[tuple[str, list[tuple[str, int]]]]
    """(name, [(bin label, count), ...])."""
    percentiles: list[tuple[str, list[float | None], str]]
    """(what, [p50, p90, p95, p99, max], unit)."""
    totals: list[tuple[str, str]]
    listing: _Listing
    notes: list[str] = field(default_factory=list)


# --- batch and check outputs -----------------------------------------------------------------


class BatchHtmlReport:
    """The HTML report of a `reflection batch` or `reflection check` output, built row by row."""

    def __init__(self, source: str | Path = ""):
        self.source = str(source)
        self.summary = ReportBuilder()
        self.present: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.scores: dict[str, Counter[int]] = {}
        self.costs = array("d")
        self.listing = _Listing()

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row."""
        self.summary.add(row)
        for key, value in row.items():
            if _is_check_key(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.present[key] += 1
                # One count per row, as the table and the bars count: the flat key is the lowest
                # score over the row's calls, as (score - 1) / 4.
                if key.startswith("semantic_") and 0 <= value <= 1:
                    self.scores.setdefault(key, Counter())[round(value * 4) + 1] += 1
        failed = failed_checks(row)
        self.failed.update(failed)
        usage = row.get("usage")
        if isinstance(usage, Mapping) and usage.get("requests") and usage.get("cost_usd") is not None:
            self.costs.append(float(usage["cost_usd"]))
        errors = row_problems(row)
        if not (failed or errors or row.get("overall_valid") is False):
            return

        def make() -> _Row:
            verdict = row.get("overall_valid")
            label = (
                "error"
                if "error" in row
                else "valid"
                if verdict is True
                else "invalid"
                if verdict is False
                else "unknown"
            )
            return _Row(str(row.get("id")), label, _batch_details(row, errors), _batch_calls(row))

        # A row invalid with no failing check named (say, a --flat row) is still listed.
        self.listing.add(failed + (["error"] if errors else []), make)

    def render(self) -> str:
        """The page."""
        report = self.summary.build()
        n = report.rows

        def share(k: int) -> str:
            return f"{k:,} ({format_share(k, n)})" if n else "0"

        cards = [
            ("rows", f"{n:,}", ""),
            ("valid", share(report.valid), "good"),
            ("invalid", share(report.invalid), "bad"),
            ("unknown", share(report.unknown), "warn"),
            ("error", share(report.error), "warn" if report.error else ""),
            ("judge skipped", f"{report.judge_skipped:,}", ""),
        ]
        checks = sorted(self.present, key=lambda k: (not k.startswith("static_"), k))
        judge = report.judge
        latencies = sorted(self.summary.latencies)
        return _render(
            _Page(
                title="reflection report",
                source=self.source,
                cards=cards,
                table_title="Mean of each flat key (over rows where present)",
                table_head=("key", "mean", "rows"),
                table=[(key, f"{mean:.3f}", f"{report.present[key]:,}") for key, mean in report.means.items()],
                bars_title="Failure rate per check (rows)",
                bars=[(key, self.failed[key], self.present[key]) for key in checks],
                distributions_title="Judge scores per semantic check (1-5), in rows: a row with several calls "
                "counts its lowest score, as its flat key does",
                distributions=[
                    (name, [(str(s), counts[s]) for s in range(1, 6)]) for name, counts in sorted(self.scores.items())
                ],
                percentiles=[
                    ("latency per row", _quantiles(latencies), "ms"),
                    ("judge cost per judged row", _quantiles(sorted(self.costs)), "USD"),
                ],
                totals=[
                    ("judge requests", f"{judge.requests:,}"),
                    ("prompt / completion tokens", f"{judge.prompt_tokens:,} / {judge.completion_tokens:,}"),
                    ("cached tokens", f"{judge.cached_tokens:,}"),
                    ("judge cost", format_cost(judge.cost_usd)),
                ],
                listing=self.listing,
            )
        )


def _is_check_key(key: str) -> bool:
    return key.startswith("static_") or (key.startswith("semantic_") and not key.startswith("semantic_avg_score_"))


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is an object, else an empty one: output files are read, not trusted."""
    return value if isinstance(value, Mapping) else {}


def _results(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    results = row.get("results")
    return [r for r in results if isinstance(r, Mapping)] if isinstance(results, list) else []


def _batch_details(row: Mapping[str, Any], errors: list[str]) -> list[tuple[str, str, list[str]]]:
    details: list[tuple[str, str, list[str]]] = [("error", shorten(message, _CELL), []) for message in errors]
    for result in _results(row):
        static, call = _mapping(result.get("static")), _mapping(result.get("call"))
        prefix = f"{call.get('name')}: " if len(_results(row)) > 1 and call.get("name") else ""
        for name, check in _mapping(static.get("checks")).items():
            if isinstance(check, Mapping) and check.get("passed") is False:
                findings = check.get("findings")
                for finding in findings if isinstance(findings, list) and findings else [{}]:
                    message = finding.get("message") if isinstance(finding, Mapping) else None
                    details.append((f"static_{name}", prefix + shorten(str(message or "failed"), _CELL), []))
        for name, check in _mapping(result.get("semantic")).items():
            if isinstance(check, Mapping) and check.get("status") == "failed":
                quotes = check.get("evidence")
                evidence = [shorten(str(q), _CELL) for q in quotes[:5]] if isinstance(quotes, list) else []
                message = f"score {check.get('score')}/5: {check.get('explanation') or ''}"
                details.append((f"semantic_{name}", prefix + shorten(message, _CELL), evidence))
    return details


def _call_text(call: Mapping[str, Any]) -> str:
    """`name {arguments}` as the row has it; the raw arguments when they could not be read."""
    name = str(call.get("name") or "?")
    arguments = call.get("arguments")
    if arguments is None and call.get("raw_arguments") is not None:
        text = f"{name} {call['raw_arguments']}"
    else:
        try:
            text = f"{name} {dumps(arguments if arguments is not None else {})}"
        except (TypeError, ValueError):
            text = f"{name} {arguments!r}"
    return shorten(text, 2 * _CELL)


def _batch_calls(row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Each call of the row with the static correction (and its notes) or the judge's suggestion."""
    lines: list[tuple[str, str, str]] = []
    for result in _results(row):
        call = _mapping(result.get("call"))
        if not call:
            continue
        static = _mapping(result.get("static"))
        error = call.get("error")
        lines.append(("proposed", _call_text(call), shorten(str(error), _CELL) if error else ""))
        correction = _mapping(static.get("correction"))
        if correction:
            notes = static.get("correction_notes")
            note = "; ".join(str(n) for n in notes[:5]) if isinstance(notes, list) else ""
            lines.append(("correction", _call_text(correction), shorten(note, _CELL)))
        for name, check in _mapping(result.get("semantic")).items():
            suggestion = _mapping(check.get("correction")) if isinstance(check, Mapping) else {}
            if not suggestion or check.get("status") != "failed":
                continue
            parts = []
            if suggestion.get("suggested_arguments") is not None:
                parts.append(
                    _call_text(
                        {
                            "name": suggestion.get("better_function") or call.get("name"),
                            "arguments": suggestion["suggested_arguments"],
                        }
                    )
                )
            elif suggestion.get("better_function"):
                parts.append(f"use {suggestion['better_function']}")
            if suggestion.get("missing_prerequisite"):
                parts.append(f"first: {suggestion['missing_prerequisite']}")
            if parts:
                lines.append(("judge suggests", shorten("; ".join(str(p) for p in parts), 2 * _CELL), str(name)))
    return lines


# --- reflection score outputs ----------------------------------------------------------------


class ScoreHtmlReport:
    """The HTML report of a `reflection score` run, built row by row; `render` takes the
    run's summary (`ScoreSummary.to_dict()`).

    A row fails a metric when its value is below that metric's threshold: `thresholds`
    (metric -> 0-1) over `metric_thresholds()`'s defaults, 1.0 (exact) for the call metrics
    and lower for the text metrics ROUGE-L and METEOR, which rarely reach 1 for a correct
    answer in other words. ValueError for a metric that does not exist."""

    def __init__(self, source: str | Path = "", thresholds: Mapping[str, float] | None = None):
        from reflection.scoring.files import JUDGED_KEYS, SCORE_KEYS, metric_thresholds

        self.source = str(source)
        self.keys = SCORE_KEYS + JUDGED_KEYS
        self.thresholds = metric_thresholds(thresholds)
        self.below: Counter[str] = Counter()
        self.bins: dict[str, list[int]] = {key: [0] * 5 for key in self.keys}
        self.costs = array("d")
        self.listing = _Listing()

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row."""
        below = []
        for key in self.keys:
            value = row.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.bins[key][min(4, max(0, int(value * 5)))] += 1
                if value < self.thresholds[key]:
                    below.append(key)
        self.below.update(below)
        usage = row.get("judge_usage")
        if isinstance(usage, Mapping) and usage.get("requests") and usage.get("cost_usd") is not None:
            self.costs.append(float(usage["cost_usd"]))
        # A scored row's `error` is the evaluator's reason the call is wrong, shown with its
        # metrics; only a row with no score at all is an error row.
        scored = any(row.get(key) is not None for key in self.keys)
        problems = [
            (key, str(row[key])) for key in ("error", "judge_error") if row.get(key) and not (key == "error" and scored)
        ]
        if not (below or problems):
            return

        def make() -> _Row:
            expected, predicted = row.get("expected_tool"), row.get("predicted_tool")
            label = f"expected {expected or '-'}, predicted {predicted or '-'}"
            details: list[tuple[str, str, list[str]]] = [
                (key, shorten(message, _CELL), []) for key, message in problems
            ]
            if scored and row.get("error"):
                details.append(("reason", shorten(str(row["error"]), _CELL), []))
            details += [(key, f"{float(row[key]):.3f} (below {self.thresholds[key]:g})", []) for key in below]
            return _Row(str(row.get("id")), label, details)

        self.listing.add(below + [key for key, _ in problems], make)

    def render(self, summary: Mapping[str, Any]) -> str:
        """The page, with `summary` (`ScoreSummary.to_dict()`) for the table and cards."""
        metrics = summary.get("metrics") or {}
        overall = summary.get("overall_score")
        cards = [
            ("rows", f"{summary.get('rows', 0):,}", ""),
            (
                "overall",
                "-" if overall is None else f"{overall:.3f} {summary.get('interpretation')}",
                {"Excellent": "good", "Good": "good", "Fair": "warn", "Poor": "bad"}.get(
                    str(summary.get("interpretation")), ""
                ),
            ),
            ("error rows", f"{summary.get('error_rows', 0):,}", "warn" if summary.get("error_rows") else ""),
            ("no call", f"{summary.get('no_call', 0):,}", ""),
            ("unknown tool", f"{summary.get('unknown_tool', 0):,}", ""),
        ]
        synonyms = summary.get("meteor_synonyms")
        notes = []
        if synonyms is False:
            notes.append("response_meteor ran without WordNet synonyms (exact and stem matches only).")
        judge = summary.get("judge") or {}
        if not judge.get("configured"):
            notes.append("No judge was configured: the judged metrics are empty.")

        def gated(key: str) -> bool:  # a threshold of 0 fails no row: the metric is shown, not gated
            return self.thresholds.get(key, 0.0) > 0

        table: list[tuple[str, ...]] = [
            (
                str(key),
                "-" if stats.get("mean") is None else f"{stats['mean']:.3f}",
                f"{self.thresholds[key]:g}" if gated(key) else "off",
                f"{self.below[key]:,}" if stats.get("n") and gated(key) else "-",
                f"{stats.get('n', 0):,}",
            )
            for key, stats in metrics.items()
        ]
        scored = [key for key in self.keys if (metrics.get(key) or {}).get("n")]
        return _render(
            _Page(
                title="reflection score",
                source=self.source,
                cards=cards,
                table_title="Each metric over the rows it applies to",
                table_head=("metric", "mean", "threshold", "rows below", "rows"),
                table=table,
                bars_title="Rows below the threshold per metric",
                bars=[(key, self.below[key], metrics[key]["n"]) for key in scored if gated(key)],
                distributions_title="Distribution of each score, in rows",
                distributions=[
                    (key, list(zip(("0-.2", ".2-.4", ".4-.6", ".6-.8", ".8-1"), self.bins[key], strict=True)))
                    for key in scored
                ],
                percentiles=[("judge cost per judged row", _quantiles(sorted(self.costs)), "USD")],
                totals=[
                    ("judge requests", f"{judge.get('requests', 0):,}"),
                    (
                        "prompt / completion tokens",
                        f"{judge.get('prompt_tokens', 0):,} / {judge.get('completion_tokens', 0):,}",
                    ),
                    ("judge cost", format_cost(judge.get("cost_usd", 0.0))),
                    ("METEOR synonyms", {True: "on (WordNet)", False: "off", None: "-"}[synonyms]),
                ],
                listing=self.listing,
                notes=notes,
            )
        )


# --- the page --------------------------------------------------------------------------------


def _quantiles(ordered: list[float]) -> list[float | None]:
    return [percentile(ordered, q) for _, q in _QUANTILES] + [ordered[-1] if ordered else None]


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"${value:,.5f}" if unit == "USD" else f"{value:,.1f} {unit}"


def _text_width(text: str, px: float = 7.2) -> float:
    """The width an SVG label needs, over-estimated (digits and commas of a 12px system font are
    narrower than 7.2px), so a count of any length stays inside its picture."""
    return len(text) * px


def _bar_chart(bars: list[tuple[str, int, int]], filters: dict[str, str]) -> str:
    if not bars:
        return '<p class="empty">No checks in these rows.</p>'
    label_w, chart_w, row_h = 290, 250, 24
    values = [(f"{format_share(failed, total)} ", f"({failed:,}/{total:,})") for _, failed, total in bars]
    value_w = max(_text_width(a + b) for a, b in values) + 12
    width, height = round(label_w + chart_w + 8 + value_w), row_h * len(bars) + 8
    parts = [
        f'<svg class="bars" role="img" aria-label="failure rate per check" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
    ]
    for i, ((name, failed, total), (rate_text, counts)) in enumerate(zip(bars, values, strict=True)):
        y = 4 + i * row_h
        rate = failed / total if total else 0.0
        bar_w = max(rate * chart_w, 1.5 if failed else 0)
        tone = "bad" if rate >= 0.25 else "warn" if rate > 0 else "good"
        key = _e(filters.get(name, ""))
        # The label is a link to the failing rows filtered to the check.
        parts.append(
            f'<g class="bar-row" data-check="{key}" data-name="{_e(name)}"><a href="#check={key}">'
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end" class="label">{_e(shorten(name, 44))}</text></a>'
            f'<rect x="{label_w}" y="{y + 4}" width="{chart_w}" height="{row_h - 8}" class="track"/>'
            f'<rect x="{label_w}" y="{y + 4}" width="{bar_w:.1f}" height="{row_h - 8}" class="bar {tone}">'
            f"<title>{_e(name)}: {failed:,} of {total:,} rows</title></rect>"
            f'<text x="{label_w + chart_w + 8}" y="{y + 16}" class="value">{_e(rate_text)}'
            f'<tspan class="muted">{_e(counts)}</tspan></text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _histogram(name: str, bins: list[tuple[str, int]], unit: str) -> str:
    # Each bin is as wide as its longest label or count, so five- and six-digit counts fit.
    step = max(
        44.0,
        max(_text_width(f"{count:,}", 6.8) + 8 for _, count in bins),
        max(_text_width(label, 6.8) + 8 for label, _ in bins),
    )
    width, height, top, bottom = round(step * len(bins) + 8), 120, 18, 22
    peak = max((count for _, count in bins), default=0) or 1
    total = sum(count for _, count in bins)
    parts = [
        f'<figure class="hist"><figcaption>{_e(shorten(name, 48))} '
        f'<span class="muted">({total:,} {_e(unit)})</span></figcaption>'
        f'<svg role="img" aria-label="{_e(name)} distribution over {total:,} {_e(unit)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
    ]
    for i, (label, count) in enumerate(bins):
        h = (height - top - bottom) * count / peak
        x = i * step + 4
        y = height - bottom - h
        parts.append(
            f'<rect class="bin" x="{x:.1f}" y="{y:.1f}" width="{step - 8:.1f}" height="{h:.1f}">'
            f"<title>{_e(label)}: {count:,} {_e(unit)}</title></rect>"
            f'<text class="count" x="{x + (step - 8) / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">'
            f"{count:,}</text>"
            f'<text class="axis" x="{x + (step - 8) / 2:.1f}" y="{height - 6}" text-anchor="middle">'
            f"{_e(label)}</text>"
        )
    parts.append("</svg></figure>")
    return "".join(parts)


def _failing_rows(listing: _Listing, filters: dict[str, str]) -> str:
    if not listing.rows:
        return (
            f'<p class="empty">{_e(listing.note())}</p>' if listing.total else '<p class="empty">No failing rows.</p>'
        )
    # Each view's sentence is written here, so the script only shows it: counts stay exact.
    options = "".join(
        f'<option value="{_e(key)}" data-note="{_e(listing.note(name, name))}">'
        f"{_e(shorten(name, 60))} ({listing.by_check[name]:,})</option>"
        for name, key in filters.items()
    )
    parts = [
        '<div class="filter"><label for="check-filter">Check</label> '
        f'<select id="check-filter"><option value="" data-note="{_e(listing.note())}">all checks '
        f"({listing.total:,})</option>{options}</select> "
        f'<span id="shown" class="muted">{_e(listing.note())}</span></div>'
    ]
    with_calls = any(row.calls for row in listing.rows)  # score rows have none
    parts.append(
        '<table class="rows"><thead><tr><th>id</th><th>status</th>'
        + ("<th>call</th>" if with_calls else "")
        + "<th>findings</th></tr></thead><tbody>"
    )
    for row in listing.rows:
        keys = " ".join(sorted({filters[c] for c in row.listed if c in filters}))
        items = []
        for check, message, evidence in row.details:
            quotes = "".join(f"<q>{_e(q)}</q>" for q in evidence)
            items.append(
                f'<li><span class="tag">{_e(shorten(check, 60))}</span> {_e(message)}'
                + (f'<div class="evidence">{quotes}</div>' if quotes else "")
                + "</li>"
            )
        calls = "".join(
            f'<div class="call {_e(kind.split()[0])}"><span class="kind">{_e(kind)}</span> '
            f"<code>{_e(text)}</code>" + (f'<div class="muted">{_e(note)}</div>' if note else "") + "</div>"
            for kind, text, note in row.calls
        )
        # Rows listed only under a check's filter start hidden, so the page is right without its script.
        parts.append(
            f'<tr class="failing" data-all="{int(row.in_all)}" data-checks="{_e(keys)}"'
            f'{"" if row.in_all else " hidden"}><td class="id">{_e(shorten(row.rid, 80))}</td>'
            f'<td><span class="status {_e(row.label.split()[0])}">{_e(row.label)}</span></td>'
            + (f'<td class="calls">{calls or "-"}</td>' if with_calls else "")
            + f"<td><ul>{''.join(items)}</ul></td></tr>"
        )
    parts.append("</tbody></table>")
    return "".join(parts)


_CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d8dee4;--bg:#f6f8fa;--good:#1a7f37;--bad:#cf222e;--warn:#bf8700;
--accent:#0969da}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:#fff}header{padding:20px 32px;border-bottom:1px solid var(--line);background:var(--bg)}
h1{margin:0;font-size:22px}h2{font-size:16px;margin:28px 0 10px}.source{color:var(--muted);margin-top:4px;
word-break:break-all}main{padding:8px 32px 40px;max-width:1200px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:18px}.card{border:1px solid var(--line);border-radius:8px;
padding:10px 16px;min-width:130px;background:#fff}.card .v{font-size:20px;font-weight:600}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card.good .v{color:var(--good)}.card.bad .v{color:var(--bad)}.card.warn .v{color:var(--warn)}
.grid{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1.4fr);gap:32px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:5px 10px;border-bottom:1px solid var(--line);
vertical-align:top}th{background:var(--bg);font-weight:600}td.num,th.num{text-align:right;
font-variant-numeric:tabular-nums}svg text{font:12px system-ui,sans-serif;fill:var(--fg)}svg .muted{fill:var(--muted)}
svg.bars{max-width:100%;height:auto}
svg a text{fill:var(--accent);text-decoration:underline}.track{fill:var(--bg)}.bar.good{fill:var(--good)}.bar.warn{fill:var(--warn)}.bar.bad{fill:var(--bad)}
.bin{fill:var(--accent)}.hists{display:flex;flex-wrap:wrap;gap:18px}.hist{margin:0;border:1px solid var(--line);
border-radius:8px;padding:8px}.hist figcaption{font-weight:600;font-size:12px;margin-bottom:2px}
.axis{fill:var(--muted)}.count{font-size:11px}.muted{color:var(--muted)}.empty{color:var(--muted);font-style:italic}
.filter{margin:8px 0 12px}select{font:inherit;padding:3px 6px}.rows td.id{font-family:ui-monospace,monospace;
word-break:break-all;width:16%}.rows td.calls{width:36%}
.call{display:grid;grid-template-columns:84px minmax(0,1fr);column-gap:6px;margin:2px 0}
.call code{font-family:ui-monospace,monospace;font-size:12px;background:var(--bg);border-radius:4px;padding:0 4px;
word-break:break-word}.call .kind{font-size:12px;color:var(--muted);padding-top:1px}
.call.correction .kind,.call.judge .kind{color:var(--good)}.call .muted{grid-column:2;font-size:12px}.rows ul{margin:0;padding-left:16px}.rows li{margin:2px 0;word-break:break-word}
.tag{display:inline-block;font-family:ui-monospace,monospace;font-size:12px;background:#ddf4ff;color:#0550ae;
border-radius:4px;padding:0 5px}.status{font-weight:600}.status.invalid{color:var(--bad)}
.status.error,.status.unknown{color:var(--warn)}.evidence q{display:block;color:var(--muted);font-style:italic;
margin-left:8px}.notes{color:var(--warn)}tr[hidden]{display:none}
"""

# Filters the failing rows by check; `#check=<key>` in the address preselects one. With no
# check chosen it shows the rows marked data-all; the sentence for each view comes with the page.
_JS = """
(function(){
var select=document.getElementById('check-filter');
var rows=Array.prototype.slice.call(document.querySelectorAll('tr.failing'));
var shown=document.getElementById('shown');
function apply(){
  var key=select?select.value:'';
  rows.forEach(function(r){
    r.hidden=key?r.getAttribute('data-checks').split(' ').indexOf(key)<0:r.getAttribute('data-all')!=='1';});
  if(shown&&select&&select.selectedIndex>=0){shown.textContent=select.options[select.selectedIndex].getAttribute('data-note');}
}
function fromAddress(){
  var m=/^#check=(.+)$/.exec(window.location.hash);
  if(select&&m){try{select.value=decodeURIComponent(m[1]);}catch(e){select.value='';}
    if(select.selectedIndex<0){select.value='';}}
}
if(select){
  fromAddress();
  select.addEventListener('change',apply);
  window.addEventListener('hashchange',function(){fromAddress();apply();select.scrollIntoView();});
}
apply();
document.body.setAttribute('data-ready','1');
})();
"""


def _render(page: _Page) -> str:
    names = list(dict.fromkeys([name for name, _, _ in page.bars] + list(page.listing.by_check)))
    filters = {name: f"c{i}" for i, name in enumerate(names)}
    script_hash = base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()
    # No request of any kind leaves the page: no fonts, images, scripts or styles from elsewhere.
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; img-src data:"
    cards = "".join(
        f'<div class="card {tone}"><div class="k">{_e(label)}</div><div class="v">{_e(value)}</div></div>'
        for label, value, tone in page.cards
    )
    head = "".join(f'<th class="{"num" if i else ""}">{_e(h)}</th>' for i, h in enumerate(page.table_head))
    table = "".join(
        "<tr>" + "".join(f'<td class="{"num" if i else ""}">{_e(v)}</td>' for i, v in enumerate(row)) + "</tr>"
        for row in page.table
    )
    quantile_head = "".join(f'<th class="num">{name}</th>' for name, _ in _QUANTILES)
    quantiles = "".join(
        f"<tr><td>{_e(what)}</td>" + "".join(f'<td class="num">{_e(_number(v, unit))}</td>' for v in values) + "</tr>"
        for what, values, unit in page.percentiles
    )
    totals = "".join(f'<tr><td>{_e(k)}</td><td class="num">{_e(v)}</td></tr>' for k, v in page.totals)
    hists = (
        "".join(_histogram(name, bins, "rows") for name, bins in page.distributions)
        or '<p class="empty">No scores in these rows.</p>'
    )
    notes = "".join(f'<p class="notes">{_e(note)}</p>' for note in page.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(page.title)}</title><style>{_CSS}</style></head>
<body><header><h1>{_e(page.title)}</h1><div class="source">{_e(page.source)}</div>
<div class="cards">{cards}</div>{notes}</header>
<main>
<div class="grid"><section><h2>{_e(page.table_title)}</h2>
<table class="summary"><thead><tr>{head}</tr></thead><tbody>{table}</tbody></table></section>
<section><h2>{_e(page.bars_title)}</h2>{_bar_chart(page.bars, filters)}
<h2>Judge cost and latency</h2>
<table class="quantiles"><thead><tr><th></th>{quantile_head}<th class="num">max</th></tr></thead>
<tbody>{quantiles}</tbody></table>
<table class="totals">{totals}</table></section></div>
<section><h2>{_e(page.distributions_title)}</h2><div class="hists">{hists}</div></section>
<section><h2>Failing rows ({page.listing.total:,})</h2>{_failing_rows(page.listing, filters)}</section>
</main><script>{_JS}</script></body></html>
"""


def write_html(path: str | Path, text: str) -> None:
    """Write a page to `path` (UTF-8), replacing it."""
    Path(path).write_text(text, encoding="utf-8")


def batch_report_html(rows: Iterable[Mapping[str, Any]], source: str | Path = "") -> str:
    """The HTML report over batch or check output rows."""
    report = BatchHtmlReport(source)
    for row in rows:
        report.add(row)
    return report.render()
