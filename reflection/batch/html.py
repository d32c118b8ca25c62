"""Self-contained HTML reports: `reflection report OUT --html FILE` and `reflection score ... --html FILE`.

One file with everything inline (CSS, a few lines of JavaScript, SVG charts), and a Content
Security Policy that forbids every network request, so it opens offline and can be mailed or
attached to a CI run. It holds a summary table, a bar chart of the failure rate per check (or
per metric), the distribution of each score, judge cost and latency percentiles, and the
failing rows with their findings, evidence and explanations, filterable by check.

Everything from the rows (ids, check names, messages, evidence, judge explanations) is
untrusted: it is HTML-escaped where it is written, and reaches the page only as text. The
builders read rows one at a time and keep at most `MAX_ROWS` failing rows in memory.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflection.batch.report import ReportBuilder, _failed_checks, _percentile, format_cost, row_problems

__all__ = ["MAX_ROWS", "BatchHtmlReport", "ScoreHtmlReport", "batch_report_html", "write_html"]

MAX_ROWS = 500
"""Failing rows listed in a report; the rest are counted."""
_QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))
_CELL = 200  # characters of one value in a failing row's details


def _e(value: Any) -> str:
    """Text for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _clip(text: str, limit: int = _CELL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Row:
    """A failing row as the page lists it."""

    rid: str
    label: str
    """Short status: "invalid", "error", or the tools for a score row."""
    checks: list[str]
    """The checks (or metrics) it fails; the filter keys."""
    details: list[tuple[str, str, list[str]]]
    """(check, message, evidence quotes) lines."""


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
    rows: list[_Row]
    failing_total: int
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
        self.rows: list[_Row] = []
        self.failing = 0

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row."""
        self.summary.add(row)
        for key, value in row.items():
            if _is_check_key(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.present[key] += 1
        failed = _failed_checks(row)
        self.failed.update(failed)
        for result in _results(row):
            for name, check in _mapping(result.get("semantic")).items():
                if isinstance(check, Mapping) and isinstance(check.get("score"), int):
                    self.scores.setdefault(str(name), Counter())[check["score"]] += 1
        usage = row.get("usage")
        if isinstance(usage, Mapping) and usage.get("requests") and usage.get("cost_usd") is not None:
            self.costs.append(float(usage["cost_usd"]))
        errors = row_problems(row)
        if not (failed or errors or row.get("overall_valid") is False):
            return
        self.failing += 1
        if len(self.rows) < MAX_ROWS:
            label = "error" if "error" in row else {False: "invalid", True: "valid"}.get(row.get("overall_valid"),
                                                                                         "unknown")
            checks = failed + (["error"] if errors else [])
            self.rows.append(_Row(str(row.get("id")), label, checks, _batch_details(row, errors)))

    def render(self) -> str:
        """The page."""
        report = self.summary.build()
        n = report.rows

        def share(k: int) -> str:
            return f"{k:,} ({k / n:.0%})" if n else "0"

        cards = [("rows", f"{n:,}", ""), ("valid", share(report.valid), "good"),
                 ("invalid", share(report.invalid), "bad"), ("unknown", share(report.unknown), "warn"),
                 ("error", share(report.error), "warn" if report.error else ""),
                 ("judge skipped", f"{report.judge_skipped:,}", "")]
        checks = sorted(self.present, key=lambda k: (not k.startswith("static_"), k))
        judge = report.judge
        latencies = sorted(self.summary.latencies)
        return _render(_Page(
            title="reflection report", source=self.source, cards=cards,
            table_title="Mean of each flat key (over rows where present)", table_head=("key", "mean", "rows"),
            table=[(key, f"{mean:.3f}", f"{report.present[key]:,}") for key, mean in report.means.items()],
            bars_title="Failure rate per check",
            bars=[(key, self.failed[key], self.present[key]) for key in checks],
            distributions_title="Judge scores per semantic check (1-5)",
            distributions=[(name, [(str(s), counts[s]) for s in range(1, 6)])
                           for name, counts in sorted(self.scores.items())],
            percentiles=[("latency per row", _quantiles(latencies), "ms"),
                         ("judge cost per judged row", _quantiles(sorted(self.costs)), "USD")],
            totals=[("judge requests", f"{judge.requests:,}"),
                    ("prompt / completion tokens", f"{judge.prompt_tokens:,} / {judge.completion_tokens:,}"),
                    ("cached tokens", f"{judge.cached_tokens:,}"), ("judge cost", format_cost(judge.cost_usd))],
            rows=self.rows, failing_total=self.failing,
        ))


def _is_check_key(key: str) -> bool:
    return key.startswith("static_") or (key.startswith("semantic_") and not key.startswith("semantic_avg_score_"))


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is an object, else an empty one: output files are read, not trusted."""
    return value if isinstance(value, Mapping) else {}


def _results(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    results = row.get("results")
    return [r for r in results if isinstance(r, Mapping)] if isinstance(results, list) else []


def _batch_details(row: Mapping[str, Any], errors: list[str]) -> list[tuple[str, str, list[str]]]:
    details: list[tuple[str, str, list[str]]] = [("error", _clip(message), []) for message in errors]
    for result in _results(row):
        static, call = _mapping(result.get("static")), _mapping(result.get("call"))
        prefix = f"{call.get('name')}: " if len(_results(row)) > 1 and call.get("name") else ""
        for name, check in _mapping(static.get("checks")).items():
            if isinstance(check, Mapping) and check.get("passed") is False:
                findings = check.get("findings")
                for finding in findings if isinstance(findings, list) and findings else [{}]:
                    message = finding.get("message") if isinstance(finding, Mapping) else None
                    details.append((f"static_{name}", prefix + _clip(str(message or "failed")), []))
        for name, check in _mapping(result.get("semantic")).items():
            if isinstance(check, Mapping) and check.get("status") == "failed":
                quotes = check.get("evidence")
                evidence = [_clip(str(q)) for q in quotes[:5]] if isinstance(quotes, list) else []
                message = f"score {check.get('score')}/5: {check.get('explanation') or ''}"
                details.append((f"semantic_{name}", prefix + _clip(message), evidence))
    return details


# --- reflection score outputs ----------------------------------------------------------------


class ScoreHtmlReport:
    """The HTML report of a `reflection score` run, built row by row; `render` takes the
    run's summary (`ScoreSummary.to_dict()`)."""

    def __init__(self, source: str | Path = ""):
        from reflection.scoring.files import JUDGED_KEYS, SCORE_KEYS

        self.source = str(source)
        self.keys = SCORE_KEYS + JUDGED_KEYS
        self.below: Counter[str] = Counter()
        self.bins: dict[str, list[int]] = {key: [0] * 5 for key in self.keys}
        self.costs = array("d")
        self.rows: list[_Row] = []
        self.failing = 0

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row."""
        below = []
        for key in self.keys:
            value = row.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.bins[key][min(4, max(0, int(value * 5)))] += 1
                if value < 1.0:
                    below.append(key)
        self.below.update(below)
        usage = row.get("judge_usage")
        if isinstance(usage, Mapping) and usage.get("requests") and usage.get("cost_usd") is not None:
            self.costs.append(float(usage["cost_usd"]))
        problems = [(key, str(row[key])) for key in ("error", "judge_error") if row.get(key)]
        if not (below or problems):
            return
        self.failing += 1
        if len(self.rows) < MAX_ROWS:
            expected, predicted = row.get("expected_tool"), row.get("predicted_tool")
            label = f"expected {expected or '-'}, predicted {predicted or '-'}"
            details = [(key, _clip(message), []) for key, message in problems]
            details += [(key, f"{float(row[key]):.3f}", []) for key in below]
            self.rows.append(_Row(str(row.get("id")), label, below + [key for key, _ in problems], details))

    def render(self, summary: Mapping[str, Any]) -> str:
        """The page, with `summary` (`ScoreSummary.to_dict()`) for the table and cards."""
        metrics = summary.get("metrics") or {}
        overall = summary.get("overall_score")
        cards = [("rows", f"{summary.get('rows', 0):,}", ""),
                 ("overall", "-" if overall is None else f"{overall:.3f} {summary.get('interpretation')}",
                  {"Excellent": "good", "Good": "good", "Fair": "warn", "Poor": "bad"}.get(
                      summary.get("interpretation"), "")),
                 ("error rows", f"{summary.get('error_rows', 0):,}", "warn" if summary.get("error_rows") else ""),
                 ("no call", f"{summary.get('no_call', 0):,}", ""),
                 ("unknown tool", f"{summary.get('unknown_tool', 0):,}", "")]
        synonyms = summary.get("meteor_synonyms")
        notes = []
        if synonyms is False:
            notes.append("response_meteor ran without WordNet synonyms (exact and stem matches only).")
        judge = summary.get("judge") or {}
        if not judge.get("configured"):
            notes.append("No judge was configured: the judged metrics are empty.")
        table = [(key, "-" if stats.get("mean") is None else f"{stats['mean']:.3f}", f"{stats.get('n', 0):,}")
                 for key, stats in metrics.items()]
        scored = [key for key in self.keys if (metrics.get(key) or {}).get("n")]
        return _render(_Page(
            title="reflection score", source=self.source, cards=cards,
            table_title="Mean of each metric", table_head=("metric", "mean", "rows"), table=table,
            bars_title="Rows scoring below 1 per metric",
            bars=[(key, self.below[key], metrics[key]["n"]) for key in scored],
            distributions_title="Distribution of each score",
            distributions=[(key, list(zip(("0-.2", ".2-.4", ".4-.6", ".6-.8", ".8-1"), self.bins[key], strict=True)))
                           for key in scored],
            percentiles=[("judge cost per judged row", _quantiles(sorted(self.costs)), "USD")],
            totals=[("judge requests", f"{judge.get('requests', 0):,}"),
                    ("prompt / completion tokens",
                     f"{judge.get('prompt_tokens', 0):,} / {judge.get('completion_tokens', 0):,}"),
                    ("judge cost", format_cost(judge.get("cost_usd", 0.0))),
                    ("METEOR synonyms", {True: "on (WordNet)", False: "off", None: "-"}[synonyms])],
            rows=self.rows, failing_total=self.failing, notes=notes,
        ))


# --- the page --------------------------------------------------------------------------------


def _quantiles(ordered: list[float]) -> list[float | None]:
    return [_percentile(ordered, q) for _, q in _QUANTILES] + [ordered[-1] if ordered else None]


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"${value:,.5f}" if unit == "USD" else f"{value:,.1f} {unit}"


def _bar_chart(bars: list[tuple[str, int, int]], filters: dict[str, str]) -> str:
    if not bars:
        return '<p class="empty">No checks in these rows.</p>'
    label_w, chart_w, row_h = 290, 250, 24
    height = row_h * len(bars) + 8
    parts = [f'<svg class="bars" role="img" aria-label="failure rate per check" width="{label_w + chart_w + 110}" '
             f'height="{height}" viewBox="0 0 {label_w + chart_w + 110} {height}">']
    for i, (name, failed, total) in enumerate(bars):
        y = 4 + i * row_h
        rate = failed / total if total else 0.0
        width = max(rate * chart_w, 1.5 if failed else 0)
        tone = "bad" if rate >= 0.25 else "warn" if rate > 0 else "good"
        parts.append(
            f'<g class="bar-row" data-check="{_e(filters.get(name, ""))}">'
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end" class="label">{_e(_clip(name, 44))}</text>'
            f'<rect x="{label_w}" y="{y + 4}" width="{chart_w}" height="{row_h - 8}" class="track"/>'
            f'<rect x="{label_w}" y="{y + 4}" width="{width:.1f}" height="{row_h - 8}" class="bar {tone}">'
            f'<title>{_e(name)}: {failed:,} of {total:,} rows</title></rect>'
            f'<text x="{label_w + chart_w + 8}" y="{y + 16}" class="value">{rate:.0%} '
            f'<tspan class="muted">({failed:,}/{total:,})</tspan></text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _histogram(name: str, bins: list[tuple[str, int]]) -> str:
    width, height, top, bottom = 220, 120, 18, 22
    peak = max((count for _, count in bins), default=0) or 1
    step = width / len(bins)
    parts = [f'<figure class="hist"><figcaption>{_e(_clip(name, 48))}</figcaption>'
             f'<svg role="img" aria-label="{_e(name)} distribution" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}">']
    for i, (label, count) in enumerate(bins):
        h = (height - top - bottom) * count / peak
        x = i * step + 4
        y = height - bottom - h
        parts.append(f'<rect class="bin" x="{x:.1f}" y="{y:.1f}" width="{step - 8:.1f}" height="{h:.1f}">'
                     f'<title>{_e(label)}: {count:,}</title></rect>'
                     f'<text class="count" x="{x + (step - 8) / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">'
                     f'{count:,}</text>'
                     f'<text class="axis" x="{x + (step - 8) / 2:.1f}" y="{height - 6}" text-anchor="middle">'
                     f'{_e(label)}</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


def _failing_rows(rows: list[_Row], total: int, filters: dict[str, str]) -> str:
    if not rows:
        return '<p class="empty">No failing rows.</p>'
    options = "".join(f'<option value="{_e(key)}">{_e(_clip(name, 60))}</option>' for name, key in filters.items())
    parts = ['<div class="filter"><label for="check-filter">Check</label> '
             f'<select id="check-filter"><option value="">all checks</option>{options}</select> '
             '<span id="shown" class="muted"></span></div>']
    if total > len(rows):
        parts.append(f'<p class="muted">Showing the first {len(rows):,} of {total:,} failing rows.</p>')
    parts.append('<table class="rows"><thead><tr><th>id</th><th>status</th><th>findings</th></tr></thead><tbody>')
    for row in rows:
        keys = " ".join(sorted({filters[c] for c in row.checks if c in filters}))
        items = []
        for check, message, evidence in row.details:
            quotes = "".join(f"<q>{_e(q)}</q>" for q in evidence)
            items.append(f'<li><span class="tag">{_e(_clip(check, 60))}</span> {_e(message)}'
                         + (f'<div class="evidence">{quotes}</div>' if quotes else "") + "</li>")
        parts.append(f'<tr class="failing" data-checks="{_e(keys)}"><td class="id">{_e(_clip(row.rid, 80))}</td>'
                     f'<td><span class="status {_e(row.label.split()[0])}">{_e(row.label)}</span></td>'
                     f'<td><ul>{"".join(items)}</ul></td></tr>')
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
.track{fill:var(--bg)}.bar.good{fill:var(--good)}.bar.warn{fill:var(--warn)}.bar.bad{fill:var(--bad)}
.bin{fill:var(--accent)}.hists{display:flex;flex-wrap:wrap;gap:18px}.hist{margin:0;border:1px solid var(--line);
border-radius:8px;padding:8px}.hist figcaption{font-weight:600;font-size:12px;margin-bottom:2px}
.axis{fill:var(--muted)}.count{font-size:11px}.muted{color:var(--muted)}.empty{color:var(--muted);font-style:italic}
.filter{margin:8px 0 12px}select{font:inherit;padding:3px 6px}.rows td.id{font-family:ui-monospace,monospace;
word-break:break-all;width:22%}.rows ul{margin:0;padding-left:16px}.rows li{margin:2px 0;word-break:break-word}
.tag{display:inline-block;font-family:ui-monospace,monospace;font-size:12px;background:#ddf4ff;color:#0550ae;
border-radius:4px;padding:0 5px}.status{font-weight:600}.status.invalid{color:var(--bad)}
.status.error,.status.unknown{color:var(--warn)}.evidence q{display:block;color:var(--muted);font-style:italic;
margin-left:8px}.notes{color:var(--warn)}tr[hidden]{display:none}
"""

# Filters the failing rows by check; `#check=<key>` in the address preselects one.
_JS = """
(function(){
var select=document.getElementById('check-filter');
var rows=Array.prototype.slice.call(document.querySelectorAll('tr.failing'));
var shown=document.getElementById('shown');
function apply(){
  var key=select?select.value:'';var n=0;
  rows.forEach(function(r){var on=!key||r.getAttribute('data-checks').split(' ').indexOf(key)>=0;
    r.hidden=!on;if(on){n++;}});
  if(shown){shown.textContent=n+' of '+rows.length+' rows';}
}
if(select){
  var m=/^#check=(.+)$/.exec(window.location.hash);
  if(m){select.value=decodeURIComponent(m[1]);}
  select.addEventListener('change',apply);
}
apply();
document.body.setAttribute('data-ready','1');
})();
"""


def _render(page: _Page) -> str:
    names = list(dict.fromkeys([name for name, _, _ in page.bars] + [c for row in page.rows for c in row.checks]))
    filters = {name: f"c{i}" for i, name in enumerate(names)}
    script_hash = base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()
    # No request of any kind leaves the page: no fonts, images, scripts or styles from elsewhere.
    csp = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; img-src data:"
    cards = "".join(f'<div class="card {tone}"><div class="k">{_e(label)}</div><div class="v">{_e(value)}</div></div>'
                    for label, value, tone in page.cards)
    head = "".join(f'<th class="{"num" if i else ""}">{_e(h)}</th>' for i, h in enumerate(page.table_head))
    table = "".join("<tr>" + "".join(f'<td class="{"num" if i else ""}">{_e(v)}</td>' for i, v in enumerate(row))
                    + "</tr>" for row in page.table)
    quantile_head = "".join(f'<th class="num">{name}</th>' for name, _ in _QUANTILES)
    quantiles = "".join(f"<tr><td>{_e(what)}</td>" + "".join(f'<td class="num">{_e(_number(v, unit))}</td>'
                                                              for v in values) + "</tr>"
                        for what, values, unit in page.percentiles)
    totals = "".join(f'<tr><td>{_e(k)}</td><td class="num">{_e(v)}</td></tr>' for k, v in page.totals)
    hists = "".join(_histogram(name, bins) for name, bins in page.distributions) or \
        '<p class="empty">No scores in these rows.</p>'
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
<section><h2>Failing rows ({page.failing_total:,})</h2>{_failing_rows(page.rows, page.failing_total, filters)}</section>
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
