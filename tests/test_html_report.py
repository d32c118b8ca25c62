"""The self-contained HTML report (`reflection report --html`, `reflection score --html`): its
content and escaping, then the page in a real browser (headless Chromium, Debian's `chromium`)."""

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reflection.batch._cli import app as batch_app
from reflection.batch.html import MAX_ROWS, BatchHtmlReport, ScoreHtmlReport, batch_report_html
from reflection.scoring import ScoreSummary
from reflection.testing.server import StandInJudge
from tests.test_scoring_cli import app as score_app

pytestmark = pytest.mark.slow  # processes, servers or a browser: `pytest -m "not slow"` leaves them out

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS_CHROMIUM = pytest.mark.skipif(CHROMIUM is None, reason="needs a headless browser: apt-get install chromium")
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class Dom(HTMLParser):
    """Elements of a page: (tag, attributes) in document order, and its text."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def having(self, tag: str, css_class: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.elements if t == tag and css_class in (a.get("class") or "").split()]


def batch_row(rid, *, valid=False, error=None, semantic=None, static_failed=None, latency=12.5, cost=0.001):
    static_failed = static_failed or []
    checks = {name: {"passed": name not in static_failed,
                     "findings": [{"message": f"$.city: {name} went wrong"}] if name in static_failed else []}
              for name in ("missing_required_parameter", "non_existent_function")}
    row = {"id": rid, "overall_valid": valid,
           **{f"static_{name}": 0.0 if name in static_failed else 1.0 for name in checks},
           "usage": {"requests": 1 if semantic else 0, "cost_usd": cost if semantic else 0.0},
           "latency_ms": latency,
           "results": [{"call": {"name": "get_weather"}, "static": {"checks": checks}, "semantic": semantic or {}}]}
    for name, check in (semantic or {}).items():
        row[f"semantic_{name}"] = (check["score"] - 1) / 4
    if error:
        row = {"id": rid, "overall_valid": None, "error": error}
    return row


def hallucination(score, evidence=(), explanation="grounded"):
    return {"general_hallucination_check": {"status": "passed" if score >= 4 else "failed", "score": score,
                                            "evidence": list(evidence), "explanation": explanation}}


ROWS = [
    batch_row("ok-1", valid=True, semantic=hallucination(5)),
    batch_row("ok-2", valid=True, semantic=hallucination(4)),
    batch_row("bad-1", semantic=hallucination(2, ["in Atlantis"], "Atlantis is not in the conversation")),
    batch_row("bad-2", static_failed=["missing_required_parameter"]),
    batch_row("broken", error="line 5 is not valid JSON"),
]


# --- content ---------------------------------------------------------------------------------


def test_the_batch_page_has_its_summary_bars_scores_percentiles_and_failing_rows():
    dom = Dom(batch_report_html(ROWS, source="out.jsonl"))
    text = " ".join(dom.text)
    bars = {a.get("data-check") for a in dom.having("g", "bar-row")}
    assert len(bars) == 3  # two static checks and one semantic check, each with its bar
    assert len(dom.having("rect", "bar")) == 3
    assert len(dom.having("rect", "bin")) == 5  # the hallucination check's scores 1..5
    assert [a["data-checks"] for a in dom.having("tr", "failing")] != []
    ids = [a for a in dom.having("td", "id")]
    assert len(ids) == 3  # bad-1, bad-2, broken
    assert "Atlantis is not in the conversation" in text and "in Atlantis" in text
    assert "$.city: missing_required_parameter went wrong" in text
    assert "line 5 is not valid JSON" in text
    assert "p95" in text and "12.5 ms" in text


def test_the_filter_keys_of_a_row_name_the_checks_it_fails():
    dom = Dom(batch_report_html(ROWS))
    keys = {a.get("data-check"): None for a in dom.having("g", "bar-row")}
    options = {a["value"] for t, a in dom.elements if t == "option" and a.get("value")}
    assert set(keys) <= options
    row_keys = [set(a["data-checks"].split()) for a in dom.having("tr", "failing")]
    assert all(keys_ <= options | {""} for keys_ in row_keys)
    assert len({k for ks in row_keys for k in ks}) == 3  # hallucination, missing parameter, error


def test_untrusted_text_is_escaped_everywhere():
    rows = [batch_row(HOSTILE, semantic=hallucination(1, [HOSTILE], HOSTILE)),
            {**batch_row("x"), f"static_{HOSTILE}": 0.0}, batch_row("y", error=HOSTILE)]
    page = batch_report_html(rows, source=HOSTILE)
    dom = Dom(page)
    assert [t for t, _ in dom.elements].count("script") == 1  # the page's own
    assert not [a for _, a in dom.elements if "onerror" in a]
    assert not [t for t, _ in dom.elements if t == "img"]
    assert HOSTILE in " ".join(dom.text)  # shown, as text


def test_the_page_asks_for_nothing_over_the_network():
    page = batch_report_html(ROWS)
    dom = Dom(page)
    assert not [a for t, a in dom.elements if t in ("link", "img", "iframe") or a.get("src")]
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    (csp,) = [a["content"] for t, a in dom.elements if a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_at_most_max_rows_failing_rows_are_listed_and_the_rest_counted():
    report = BatchHtmlReport()
    for i in range(MAX_ROWS + 7):
        report.add(batch_row(f"r{i}", static_failed=["non_existent_function"]))
    dom = Dom(report.render())
    assert len(dom.having("tr", "failing")) == MAX_ROWS
    assert f"Showing the first {MAX_ROWS:,} of {MAX_ROWS + 7:,} failing rows." in " ".join(dom.text)


def test_the_score_page_charts_every_metric_with_values():
    summary = ScoreSummary(wordnet=None)
    page = ScoreHtmlReport("p.jsonl")
    rows = [{"id": "a", "tool_call_equivalence": 1.0, "binary_tool_call": 0.0, "staged_tool_call": 0.75,
             "error": None, "judge_error": None},
            {"id": HOSTILE, "tool_call_equivalence": 0.0, "binary_tool_call": 0.0, "staged_tool_call": 0.25,
             "error": HOSTILE, "judge_error": None}]
    for row in rows:
        summary.add(row)
        page.add(row)
    dom = Dom(page.render(summary.to_dict()))
    assert len(dom.having("rect", "bar")) == 3
    assert len(dom.having("rect", "bin")) == 15
    assert len(dom.having("tr", "failing")) == 2
    assert [t for t, _ in dom.elements].count("script") == 1


# --- the commands ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batch_output(tmp_path_factory):
    """The shipped examples/calls.jsonl through `reflection batch` against the stand-in judge."""
    folder = tmp_path_factory.mktemp("batch")
    out = folder / "out.jsonl"
    with StandInJudge() as server:
        result = CliRunner().invoke(batch_app, ["batch", str(EXAMPLES / "calls.jsonl"), "-o", str(out), "--base-url",
                                                server.base_url, "--model", "stand-in", "--no-cache", "--no-progress"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def batch_page(batch_output):
    page = batch_output.parent / "report.html"
    result = CliRunner().invoke(batch_app, ["report", str(batch_output), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert f"wrote the HTML report to {page}" in result.stderr
    return page


@pytest.fixture(scope="module")
def score_page(tmp_path_factory):
    """The shipped examples/scoring through `reflection score --html`."""
    page = tmp_path_factory.mktemp("score") / "score.html"
    result = CliRunner().invoke(score_app(), ["score", str(EXAMPLES / "scoring" / "predictions.jsonl"), "--references",
                                              str(EXAMPLES / "scoring" / "references.jsonl"), "-o",
                                              str(page.parent / "rows.jsonl"), "--html", str(page)])
    assert result.exit_code == 0, result.output
    return page


def test_report_html_lists_every_failing_row_of_the_output(batch_output, batch_page):
    rows = [json.loads(line) for line in batch_output.read_text().splitlines()]
    failing = {r["id"] for r in rows if r.get("overall_valid") is False or "error" in r}
    dom = Dom(batch_page.read_text())
    text = " ".join(dom.text)
    assert failing and {rid for rid in failing if rid in text} == failing
    assert len(dom.having("tr", "failing")) == len(failing)


def test_report_html_reads_check_outputs_too(tmp_path):
    from reflection.cli import app as main_app

    out, page = tmp_path / "checked.jsonl", tmp_path / "checked.html"
    result = CliRunner().invoke(main_app, ["check", str(EXAMPLES / "calls.jsonl"), "--static-only", "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main_app, ["report", str(out), "--html", str(page)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    dom = Dom(page.read_text())
    assert len(dom.having("tr", "failing")) == sum(r.get("overall_valid") is False or "error" in r for r in rows) > 0
    assert len(dom.having("rect", "bar")) == len({k for r in rows for k in r if k.startswith("static_")})


def test_report_html_into_a_missing_folder_is_a_clear_error(batch_output, tmp_path):
    result = CliRunner().invoke(batch_app, ["report", str(batch_output), "--html", str(tmp_path / "no" / "r.html")])
    assert result.exit_code == 2
    assert "cannot write the HTML report: no folder" in result.stderr


def test_score_html_into_a_missing_folder_fails_before_scoring(tmp_path):
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(score_app(), ["score", str(EXAMPLES / "scoring" / "predictions.jsonl"), "--references",
                                              str(EXAMPLES / "scoring" / "references.jsonl"), "-o", str(out),
                                              "--html", str(tmp_path / "no" / "r.html")])
    assert result.exit_code == 2
    assert "no folder" in result.stderr and not out.exists()


# --- in a real browser -----------------------------------------------------------------------


def chromium(page: Path, profile: Path, *args: str, fragment: str = "") -> tuple[str, list[str]]:
    """Open `page` in headless Chromium with no network and a fresh profile: (stdout, console lines)."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", *args, page.as_uri() + fragment]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # Every console message (errors, CSP violations, uncaught exceptions) is logged as CONSOLE.
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


@NEEDS_CHROMIUM
def test_the_batch_report_renders_to_a_png_without_console_errors(batch_page, tmp_path):
    png = tmp_path / "report.png"
    _, console = chromium(batch_page, tmp_path / "profile", f"--screenshot={png}", "--window-size=1280,1600")
    assert console == []
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


@NEEDS_CHROMIUM
def test_the_rendered_batch_report_has_its_bars_and_rows_and_filters_by_check(batch_page, batch_output, tmp_path):
    static = Dom(batch_page.read_text())
    bar_rows = static.having("g", "bar-row")
    row_keys = [set(r["data-checks"].split()) for r in static.having("tr", "failing")]
    failing_key = next(a["data-check"] for a in bar_rows if any(a["data-check"] in keys for keys in row_keys))
    dom_text, console = chromium(batch_page, tmp_path / "profile", "--dump-dom", fragment=f"#check={failing_key}")
    assert console == []
    dom = Dom(dom_text)
    assert [a for t, a in dom.elements if t == "body"][0].get("data-ready") == "1"  # the script ran
    assert len(dom.having("rect", "bar")) == len(bar_rows) > 0
    rows = dom.having("tr", "failing")
    assert len(rows) == len(static.having("tr", "failing")) > 1
    shown = [r for r in rows if "hidden" not in r]
    assert shown and all(failing_key in r["data-checks"].split() for r in shown)
    assert len(shown) < len(rows)  # the filter from the address hid the other rows
    assert f"{len(shown)} of {len(rows)} rows" in " ".join(dom.text)


@NEEDS_CHROMIUM
def test_the_rendered_score_report_has_its_bars_histograms_and_rows(score_page, tmp_path):
    dom_text, console = chromium(score_page, tmp_path / "profile", "--dump-dom")
    assert console == []
    dom = Dom(dom_text)
    static = Dom(score_page.read_text())
    assert len(dom.having("rect", "bar")) == len(static.having("g", "bar-row")) >= 10
    assert len(dom.having("rect", "bin")) == 5 * len(dom.having("figure", "hist"))
    rows = dom.having("tr", "failing")
    assert rows and not [r for r in rows if "hidden" in r]
    assert f"{len(rows)} of {len(rows)} rows" in " ".join(dom.text)


def test_rows_of_an_odd_shape_are_shown_as_far_as_they_go():
    odd = {"id": "odd", "overall_valid": False, "static_x": 0.0,
           "results": [{"static": {"checks": ["not", "an", "object"]}, "call": 3},
                       {"static": {"checks": {"x": {"passed": False, "findings": "not a list"}}},
                        "semantic": {"y": {"status": "failed", "score": "2", "evidence": "not a list"}}}]}
    dom = Dom(batch_report_html([odd]))
    assert len(dom.having("tr", "failing")) == 1
    assert "static_x" in " ".join(dom.text)
