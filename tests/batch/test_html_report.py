"""The self-contained HTML report (`reflection report --html`, `reflection score --html`): its
content and escaping, then the page in a real browser (headless Chromium, Debian's `chromium`)."""

import itertools
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reflection.cli import app as batch_app
from reflection.batch.html import MAX_ROWS, BatchHtmlReport, ScoreHtmlReport, batch_report_html
from reflection.scoring import ScoreSummary
from reflection.testing.server import StandInJudge
from tests.scoring.test_scoring_cli import app as score_app

pytestmark = pytest.mark.slow  # processes, servers or a browser: `pytest -m "not slow"` leaves them out

ROOT = Path(__file__).resolve().parents[2]
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
    checks = {
        name: {
            "passed": name not in static_failed,
            "findings": [{"message": f"$.city: {name} went wrong"}] if name in static_failed else [],
        }
        for name in ("missing_required_parameter", "non_existent_function")
    }
    row = {
        "id": rid,
        "overall_valid": valid,
        **{f"static_{name}": 0.0 if name in static_failed else 1.0 for name in checks},
        "usage": {"requests": 1 if semantic else 0, "cost_usd": cost if semantic else 0.0},
        "latency_ms": latency,
        "results": [{"call": {"name": "get_weather"}, "static": {"checks": checks}, "semantic": semantic or {}}],
    }
    for name, check in (semantic or {}).items():
        row[f"semantic_{name}"] = (check["score"] - 1) / 4
    if error:
        row = {"id": rid, "overall_valid": None, "error": error}
    return row


def hallucination(score, evidence=(), explanation="grounded"):
    return {
        "general_hallucination_check": {
            "status": "passed" if score >= 4 else "failed",
            "score": score,
            "evidence": list(evidence),
            "explanation": explanation,
        }
    }


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
    links = [a["href"] for t, a in dom.elements if t == "a"]
    assert links == [f"#check={key}" for key in keys]  # each bar's label opens the rows filtered to it
    row_keys = [set(a["data-checks"].split()) for a in dom.having("tr", "failing")]
    assert all(keys_ <= options | {""} for keys_ in row_keys)
    assert len({k for ks in row_keys for k in ks}) == 3  # hallucination, missing parameter, error


def test_untrusted_text_is_escaped_everywhere():
    rows = [
        batch_row(HOSTILE, semantic=hallucination(1, [HOSTILE], HOSTILE)),
        {**batch_row("x"), f"static_{HOSTILE}": 0.0},
        batch_row("y", error=HOSTILE),
    ]
    hostile_call = {"name": HOSTILE, "arguments": {HOSTILE: HOSTILE}}
    rows[0]["results"][0].update(call=hostile_call)
    rows[0]["results"][0]["static"].update(correction=hostile_call, correction_notes=[HOSTILE])
    rows[0]["results"][0]["semantic"]["general_hallucination_check"]["correction"] = {
        "suggested_arguments": {HOSTILE: 1},
        "better_function": HOSTILE,
        "missing_prerequisite": HOSTILE,
    }
    page = batch_report_html(rows, source=HOSTILE)
    dom = Dom(page)
    assert [t for t, _ in dom.elements].count("script") == 1  # the page's own
    assert not [a for _, a in dom.elements if "onerror" in a]
    assert not [t for t, _ in dom.elements if t == "img"]
    assert HOSTILE in " ".join(dom.text)  # shown, as text
    assert any(t.startswith(HOSTILE + " {") for t in dom.text)  # the call, its tool name and arguments too


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
    assert (
        f"Showing the first {MAX_ROWS:,} of {MAX_ROWS + 7:,} failing rows; 7 more are counted but not listed"
        in " ".join(dom.text)
    )


def notes(dom: Dom) -> dict[str, str]:
    """Filter key ("" for all checks) -> the sentence the page shows for that view."""
    return {attrs["value"]: attrs["data-note"] for tag, attrs in dom.elements if tag == "option"}


def test_a_check_failing_only_past_the_cap_lists_its_rows_under_its_filter():
    report = BatchHtmlReport()
    for i in range(600):
        report.add(batch_row(f"r{i}", static_failed=["missing_required_parameter"]))
    report.add(batch_row("r600", static_failed=["non_existent_function"]))  # row 601
    dom = Dom(report.render())
    key_of = {a["data-name"]: a["data-check"] for a in dom.having("g", "bar-row")}
    late, missing = key_of["static_non_existent_function"], key_of["static_missing_required_parameter"]
    rows = dom.having("tr", "failing")
    under_late = [r for r in rows if late in r["data-checks"].split()]
    assert len(under_late) == 1 and "hidden" in under_late[0] and under_late[0]["data-all"] == "0"
    assert len([r for r in rows if missing in r["data-checks"].split()]) == MAX_ROWS
    assert len([r for r in rows if r["data-all"] == "1" and "hidden" not in r]) == MAX_ROWS
    assert len(rows) == MAX_ROWS + 1
    assert "r600" in " ".join(dom.text)
    sentences = notes(dom)
    assert sentences[late] == "Showing the 1 row failing static_non_existent_function."
    assert sentences[missing] == (
        f"Showing the first {MAX_ROWS} of 600 rows failing static_missing_required_parameter;"
        " 100 more are counted but not listed (at most 500 per view)."
    )
    assert sentences[""].startswith(f"Showing the first {MAX_ROWS} of 601 failing rows; 101 more are counted")


def test_the_rows_kept_in_memory_are_bounded_whatever_the_number_of_checks():
    from reflection.batch.html import MAX_KEPT

    report = BatchHtmlReport()
    for i in range(MAX_KEPT + 50):  # every row fails a check of its own
        report.add({"id": f"r{i}", "overall_valid": False, f"static_x{i}": 0.0})
    assert len(report.listing.rows) == MAX_KEPT
    assert report.listing.total == MAX_KEPT + 50
    assert report.listing.by_check[f"static_x{MAX_KEPT + 49}"] == 1  # counted, though not kept


def test_one_failure_in_601_rows_is_less_than_one_percent_not_zero():
    report = BatchHtmlReport()
    for i in range(600):
        report.add(batch_row(f"ok{i}", valid=True))
    report.add(batch_row("bad", static_failed=["non_existent_function"]))
    dom = Dom(report.render())
    texts = [t for t in dom.text if t.endswith(("% ", "%"))]
    assert "<1% " in texts and "0% " in texts  # the failing check, and the check nobody fails
    assert "(1/601)" in dom.text
    cards = " ".join(dom.text)
    assert "1 (<1%)" in cards  # the invalid card
    assert "600 (>99%)" in cards  # the valid card: not 100% while one row is invalid


def svg_text_fits(svg: dict[str, str | None], x: float, text: str, anchor: str = "start") -> bool:
    """The text, at 7px a character (wider than the system font's digits), is inside the picture."""
    width = float(svg["width"] or 0)
    half = len(text) * 7 / 2
    left, right = (x, x + 2 * half) if anchor == "start" else (x - half, x + half)
    return left >= 0 and right <= width


class Svgs(HTMLParser):
    """Each SVG's attributes and its <text> elements [x, anchor, text, class]."""

    def __init__(self, page: str):
        super().__init__()
        self.svgs: list[tuple[dict[str, str | None], list[list]]] = []
        self.current: list | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg":
            self.svgs.append((attrs, []))
        elif tag == "text" and self.svgs:
            self.current = [float(attrs["x"]), attrs.get("text-anchor") or "start", "", attrs.get("class")]
            self.svgs[-1][1].append(self.current)

    def handle_data(self, data):
        if self.current is not None:
            self.current[2] += data

    def handle_endtag(self, tag):
        if tag == "text":
            self.current = None


def test_five_and_six_digit_counts_fit_inside_their_charts():
    report = BatchHtmlReport()
    for i in range(123_457):
        failing = i % 2 == 0
        report.add(
            {
                "id": f"r{i}",
                "overall_valid": not failing,
                "static_non_existent_function": 0.0 if failing else 1.0,
                "semantic_general_hallucination_check": 0.0 if failing else 1.0,
            }
        )
    page = report.render()
    svgs = Svgs(page).svgs
    assert len(svgs) == 2  # the bars and one histogram
    for svg, texts in svgs:
        for x, anchor, text, _ in texts:
            assert svg_text_fits(svg, x, text, anchor), (text, svg["width"])
    assert any("(61,729/123,457)" in text for _, texts in svgs for _, _, text, _ in texts)
    ((_, hist),) = [(svg, texts) for svg, texts in svgs if "distribution" in (svg.get("aria-label") or "")]
    counts = [(x, text) for x, _, text, kind in hist if kind == "count"]
    assert ("61,729" in [t for _, t in counts]) and ("61,728" in [t for _, t in counts])
    for (x1, t1), (x2, t2) in itertools.pairwise(counts):
        assert x2 - x1 >= (len(t1) + len(t2)) * 7 / 2  # neighbouring counts do not overlap


def test_judge_score_histograms_count_rows_as_the_table_does():
    two_calls = batch_row("two", semantic=hallucination(5))
    two_calls["results"].append(
        {"call": {"name": "get_weather"}, "static": {"checks": {}}, "semantic": hallucination(2, ["x"], "no")}
    )
    two_calls["semantic_general_hallucination_check"] = 0.25  # the flat key: the lowest of the calls
    dom = Dom(batch_report_html(ROWS + [two_calls]))
    (caption,) = [t for t in dom.text if t.startswith("(") and t.endswith(" rows)")]
    assert caption == "(4 rows)"  # ok-1, ok-2, bad-1, two: one count each, as the table's "rows"
    text = " ".join(dom.text)
    assert "in rows: a row with several calls counts its lowest score" in text
    summary = " ".join(dom.text[dom.text.index("key") : dom.text.index("Failure rate per check (rows)")])
    assert "semantic_general_hallucination_check 0.562 4" in " ".join(summary.split())


def test_failing_rows_show_each_proposed_call_with_its_correction():
    row = batch_row("fixable", static_failed=["allowed_values_violation"])
    result = row["results"][0]
    result["call"] = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "Fahrenheit"}}
    result["static"]["correction"] = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "fahrenheit"}}
    result["static"]["correction_notes"] = ['$.unit: changed "Fahrenheit" to the allowed value "fahrenheit"']
    judged = batch_row("judged", semantic=hallucination(1, ["Paris"], "the user said Paris"))
    judged["results"][0]["call"] = {"name": "get_weather", "arguments": {"city": "Atlantis"}}
    judged["results"][0]["semantic"]["general_hallucination_check"]["correction"] = {
        "suggested_arguments": {"city": "Paris"},
        "better_function": None,
        "missing_prerequisite": None,
    }
    unreadable = batch_row("unreadable", static_failed=["non_existent_function"])
    unreadable["results"][0]["call"] = {
        "name": "get_weather",
        "arguments": None,
        "raw_arguments": '{"city": ',
        "error": "the arguments are not valid JSON",
    }
    dom = Dom(batch_report_html([row, judged, unreadable]))
    text = " ".join(" ".join(dom.text).split())
    assert len(dom.having("td", "calls")) == 3
    assert 'proposed get_weather {"city":"Paris","unit":"Fahrenheit"}' in text
    assert 'correction get_weather {"city":"Paris","unit":"fahrenheit"}' in text
    assert '$.unit: changed "Fahrenheit" to the allowed value "fahrenheit"' in text
    assert 'judge suggests get_weather {"city":"Paris"}' in text
    assert 'proposed get_weather {"city":' in text and "the arguments are not valid JSON" in text


def test_the_score_page_charts_every_metric_with_values():
    summary = ScoreSummary(wordnet=None)
    page = ScoreHtmlReport("p.jsonl")
    rows = [
        {
            "id": "a",
            "tool_call_equivalence": 1.0,
            "binary_tool_call": 0.0,
            "staged_tool_call": 0.75,
            "error": None,
            "judge_error": None,
        },
        {
            "id": HOSTILE,
            "tool_call_equivalence": 0.0,
            "binary_tool_call": 0.0,
            "staged_tool_call": 0.25,
            "error": HOSTILE,
            "judge_error": None,
        },
    ]
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
        result = CliRunner().invoke(
            batch_app,
            [
                "batch",
                str(EXAMPLES / "calls.jsonl"),
                "-o",
                str(out),
                "--base-url",
                server.base_url,
                "--model",
                "stand-in",
                "--no-cache",
                "--no-progress",
            ],
        )
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
    result = CliRunner().invoke(
        score_app(),
        [
            "score",
            str(EXAMPLES / "scoring" / "predictions.jsonl"),
            "--references",
            str(EXAMPLES / "scoring" / "references.jsonl"),
            "-o",
            str(page.parent / "rows.jsonl"),
            "--html",
            str(page),
        ],
    )
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
    result = CliRunner().invoke(
        score_app(),
        [
            "score",
            str(EXAMPLES / "scoring" / "predictions.jsonl"),
            "--references",
            str(EXAMPLES / "scoring" / "references.jsonl"),
            "-o",
            str(out),
            "--html",
            str(tmp_path / "no" / "r.html"),
        ],
    )
    assert result.exit_code == 2
    assert "no folder" in result.stderr and not out.exists()


# --- in a real browser -----------------------------------------------------------------------


def chromium(page: Path, profile: Path, *args: str, fragment: str = "") -> tuple[str, list[str]]:
    """Open `page` in headless Chromium with no network and a fresh profile: (stdout, console lines)."""
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        page.as_uri() + fragment,
    ]
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
    assert notes(static)[failing_key] in dom.text  # the view's sentence replaced the page's
    assert notes(static)[failing_key].startswith(f"Showing {'the' if len(shown) == 1 else 'all'} {len(shown)} ")


@NEEDS_CHROMIUM
def test_the_rendered_score_report_has_its_bars_histograms_and_rows(score_page, tmp_path):
    dom_text, console = chromium(score_page, tmp_path / "profile", "--dump-dom")
    assert console == []
    dom = Dom(dom_text)
    static = Dom(score_page.read_text())
    assert len(dom.having("rect", "bar")) == len(static.having("g", "bar-row")) >= 9  # exact match: no bar
    assert len(dom.having("rect", "bin")) == 5 * len(dom.having("figure", "hist"))
    rows = dom.having("tr", "failing")
    assert rows and not [r for r in rows if "hidden" in r]
    assert f"Showing all {len(rows)} failing rows." in dom.text


@NEEDS_CHROMIUM
def test_the_rendered_filter_shows_a_check_that_fails_only_past_the_cap(tmp_path):
    report = BatchHtmlReport()
    for i in range(600):
        report.add(batch_row(f"r{i}", static_failed=["missing_required_parameter"]))
    report.add(batch_row("row-601", static_failed=["non_existent_function"]))
    page = tmp_path / "capped.html"
    page.write_text(report.render(), encoding="utf-8")
    static = Dom(page.read_text())
    key = next(
        a["data-check"] for a in static.having("g", "bar-row") if a["data-name"] == "static_non_existent_function"
    )
    for fragment, expected in ((f"#check={key}", 1), ("", MAX_ROWS)):
        dom_text, console = chromium(page, tmp_path / f"profile{len(fragment)}", "--dump-dom", fragment=fragment)
        assert console == []
        dom = Dom(dom_text)
        shown = [r for r in dom.having("tr", "failing") if "hidden" not in r]
        assert len(shown) == expected
        if fragment:  # the one row past the cap, under its check's filter
            assert key in shown[0]["data-checks"].split() and shown[0]["data-all"] == "0"
        else:
            assert all(r["data-all"] == "1" for r in shown)
        assert notes(static)[key if fragment else ""] in dom.text


def test_rows_of_an_odd_shape_are_shown_as_far_as_they_go():
    odd = {
        "id": "odd",
        "overall_valid": False,
        "static_x": 0.0,
        "results": [
            {"static": {"checks": ["not", "an", "object"]}, "call": 3},
            {
                "static": {"checks": {"x": {"passed": False, "findings": "not a list"}}},
                "semantic": {"y": {"status": "failed", "score": "2", "evidence": "not a list"}},
            },
        ],
    }
    dom = Dom(batch_report_html([odd]))
    assert len(dom.having("tr", "failing")) == 1
    assert "static_x" in " ".join(dom.text)


# --- the score report's thresholds -------------------------------------------------------------


def score_rows():
    base = {
        "tool_call_equivalence": 1.0,
        "binary_tool_call": 1.0,
        "response_exact_match": 0.0,
        "error": None,
        "judge_error": None,
    }
    return [
        {"id": "paraphrase", **base, "response_rouge_l": 0.8, "response_meteor": 0.7},
        {"id": "off-topic", **base, "response_rouge_l": 0.2, "response_meteor": 0.6},
        {"id": "wrong-call", **base, "tool_call_equivalence": 0.5, "response_rouge_l": 1.0, "response_meteor": 1.0},
    ]


def score_page_of(rows, thresholds=None) -> Dom:
    summary, page = ScoreSummary(wordnet=None), ScoreHtmlReport("p.jsonl", thresholds)
    for row in rows:
        summary.add(row)
        page.add(row)
    return Dom(page.render(summary.to_dict()))


def test_text_metrics_fail_below_their_threshold_not_below_one():
    dom = score_page_of(score_rows())
    assert len(dom.having("tr", "failing")) == 2  # off-topic (ROUGE-L 0.2) and wrong-call, not the paraphrase
    text = " ".join(" ".join(dom.text).split())
    assert "paraphrase" not in text and "response_rouge_l 0.200 (below 0.5)" in text
    assert "tool_call_equivalence 0.500 (below 1)" in text
    bars = {a["data-name"]: a for a in dom.having("g", "bar-row")}
    assert "(1/3)" in text and set(bars) >= {"response_rouge_l", "response_meteor"}
    assert "response_rouge_l 0.667 0.5 1 3" in text  # the table: mean, threshold, rows below, rows
    assert "response_meteor 0.767 0.5 0 3" in text
    assert "response_exact_match 0.000 off - 3" in text  # shown, but a paraphrase fails no row for it
    assert "response_exact_match" not in bars


def test_a_scored_rows_error_is_its_reason_not_an_error_row():
    rows = [
        {
            "id": "wrong-tool",
            "tool_call_equivalence": 0.0,
            "execution_success": 0.0,
            "error": "called 'web_search' instead",
            "judge_error": None,
        },
        {
            "id": "unjoined",
            "tool_call_equivalence": None,
            "error": "no reference has id 'unjoined'",
            "judge_error": None,
        },
    ]
    dom = score_page_of(rows)
    text = " ".join(" ".join(dom.text).split())
    assert "reason called 'web_search' instead" in text
    assert "error no reference has id 'unjoined'" in text
    assert notes(dom)[
        next(a["data-check"] for a in dom.having("g", "bar-row") if a["data-name"] == "tool_call_equivalence")
    ].startswith("Showing the 1 row")
    options = [t for t in dom.text if t.startswith("error (")]
    assert options == ["error (1)"]  # only the row that could not be scored


def test_score_thresholds_are_configurable():
    dom = score_page_of(score_rows(), {"response_rouge_l": 0.9, "tool_call_equivalence": 0.5})
    text = " ".join(" ".join(dom.text).split())
    assert len(dom.having("tr", "failing")) == 2  # paraphrase (0.8 < 0.9) and off-topic; not wrong-call
    assert "response_rouge_l 0.800 (below 0.9)" in text and "wrong-call" not in text


def test_a_threshold_for_an_unknown_metric_is_refused():
    with pytest.raises(ValueError, match=r"unknown metrics \['rouge'\]"):
        ScoreHtmlReport(thresholds={"rouge": 0.5})
    with pytest.raises(ValueError, match="between 0 and 1"):
        ScoreHtmlReport(thresholds={"response_meteor": 2})


def test_score_html_reads_its_thresholds_from_the_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("score_thresholds:\n  response_rouge_l: 0.99\n  response_meteor: 0.0\n", encoding="utf-8")
    page = tmp_path / "score.html"
    args = [
        "score",
        str(EXAMPLES / "scoring" / "predictions.jsonl"),
        "--references",
        str(EXAMPLES / "scoring" / "references.jsonl"),
        "-o",
        str(tmp_path / "rows.jsonl"),
        "--html",
        str(page),
    ]
    result = CliRunner().invoke(score_app(), [*args, "--config", str(config)])
    assert result.exit_code == 0, result.output
    text = " ".join(" ".join(Dom(page.read_text()).text).split())
    assert "response_rouge_l" in text and "(below 0.99)" in text and "response_meteor 0.937 off - 3" in text
    config.write_text("score_thresholds:\n  rouge: 0.5\n", encoding="utf-8")
    result = CliRunner().invoke(score_app(), [*args, "--config", str(config)])
    assert result.exit_code == 2 and "score_thresholds for unknown metrics ['rouge']" in result.stderr


def test_the_score_thresholds_setting_keeps_the_defaults_it_does_not_name(monkeypatch):
    from reflection.config import DEFAULT_SCORE_THRESHOLDS, ReflectionConfig

    assert (
        ReflectionConfig().score_thresholds
        == DEFAULT_SCORE_THRESHOLDS
        == {"response_exact_match": 0.0, "response_rouge_l": 0.5, "response_meteor": 0.5}
    )
    monkeypatch.setenv("REFLECTION_SCORE_THRESHOLDS", '{"response_meteor": 0.3}')
    assert ReflectionConfig().score_thresholds == {
        "response_exact_match": 0.0,
        "response_rouge_l": 0.5,
        "response_meteor": 0.3,
    }
    monkeypatch.delenv("REFLECTION_SCORE_THRESHOLDS")
    with pytest.raises(ValueError, match="between 0 and 1"):
        ReflectionConfig(score_thresholds={"response_meteor": 1.5})


@NEEDS_CHROMIUM
def test_a_malformed_or_unknown_check_in_the_address_shows_every_row_without_errors(batch_page, tmp_path):
    static = Dom(batch_page.read_text())
    for fragment in ("#check=%E0%A4%A", "#check=nothing-like-it"):
        dom_text, console = chromium(batch_page, tmp_path / f"profile{len(fragment)}", "--dump-dom", fragment=fragment)
        assert console == []
        dom = Dom(dom_text)
        shown = [r for r in dom.having("tr", "failing") if "hidden" not in r]
        assert len(shown) == len([r for r in static.having("tr", "failing") if r["data-all"] == "1"]) > 0
        assert notes(static)[""] in dom.text
