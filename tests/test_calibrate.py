"""`reflection calibrate`: counts, sweeps and suggestions from a judge scripted row by row."""

import json
import os
import sys
from pathlib import Path

import httpx
import pytest
import respx
from typer.testing import CliRunner

from reflection import ReflectionConfig
from reflection.calibrate import (
    LabeledRow,
    LabelError,
    Observation,
    calibrate,
    observe,
    read_labeled,
)
from reflection.cli import app
from reflection.judge import JudgeConfig
from reflection.model import SEMANTIC_CHECKS, STATIC_CHECKS
from reflection.testing._protocol import check_reply, completion, request_data, requested_checks
from reflection._json import dumps, parse_json

runner = CliRunner()
BASE_URL = "http://calibration-judge.test/v1"
HAL = "general_hallucination_check"
SHIPPED = Path(__file__).resolve().parents[1] / "examples" / "labeled.jsonl"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "refund",
            "parameters": {"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}},
        },
    }
]

# order id -> (label valid, hallucination score, confidence); None: the judge fails on that row.
SCRIPT = {
    "A1": (True, 5, 0.9),
    "A2": (True, 5, 0.9),
    "A3": (True, 3, 0.9),
    "A4": (True, 2, 0.55),
    "A5": (False, 1, 0.95),
    "A6": (False, 2, 0.9),
    "A7": (False, 3, 0.8),
    "A8": (False, 4, 0.9),
    "A10": (True, None, None),
}


def labelled_rows() -> list[dict]:
    rows = [
        {
            "id": oid,
            "tools": TOOLS,
            "history": f"Please refund order {oid}",
            "call": {"name": "refund", "arguments": {"order_id": oid}},
            "label": {"valid": valid, "checks": {} if valid else {HAL: False}},
        }
        for oid, (valid, _, _) in SCRIPT.items()
    ]
    # A static failure: the judge is never asked, and overall_valid blocks it whatever the thresholds.
    rows.append(
        {
            "id": "A9",
            "tools": TOOLS,
            "history": "Please refund order 9",
            "call": {"name": "refund", "arguments": {"order_id": 9}},
            "label": {"valid": False, "checks": {"incorrect_parameter_type": False}},
        }
    )
    return rows


class ScriptedJudge:
    """A judge mocked at the HTTP layer whose reply depends on the order id in the call."""

    def __init__(self):
        self.requests = 0
        self.router = respx.mock(base_url=BASE_URL, assert_all_called=False)
        self.router.post("/chat/completions").mock(side_effect=self._reply)

    def _reply(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        body = parse_json(request.content)
        order = request_data(body)["tool_call"]["arguments"]["order_id"]
        _, score, confidence = SCRIPT[order]
        if score is None:
            return httpx.Response(500, json={"error": {"message": "scripted failure"}})
        reply = {
            name: check_reply(score, confidence=confidence) if name == HAL else check_reply(5)
            for name in requested_checks(body)
        }
        return httpx.Response(200, json=completion(dumps(reply), body))

    def __enter__(self):
        self.router.__enter__()
        return self

    def __exit__(self, *exc):
        self.router.__exit__(*exc)


def judge_config() -> JudgeConfig:
    return JudgeConfig(base_url=BASE_URL, model="scripted", api_key="test-key", max_attempts=2, retry_max_wait=0.0)


@pytest.fixture
def labelled_file(tmp_path):
    path = tmp_path / "labeled.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in labelled_rows()))
    return path


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        f"judge:\n  base_url: {BASE_URL}\n  model: scripted\n  api_key: test-key\n"
        "  max_attempts: 2\n  retry_max_wait: 0\n"
    )
    return path


async def test_counts_at_the_config_thresholds_treat_invalid_as_the_positive_class(labelled_file):
    config = ReflectionConfig(judge=judge_config())
    with ScriptedJudge():
        observations = await observe(read_labeled(labelled_file), config=config)
    report = calibrate(observations, config)
    hal = report.metrics[HAL]
    # threshold 4: A3 and A4 are false blocks, A5-A7 blocked, A8 let through; A9 was not judged, A10 failed.
    assert hal.confusion.model_dump() == {"tp": 3, "fp": 2, "tn": 2, "fn": 1}
    assert (hal.precision, hal.recall, hal.false_block_rate) == (0.6, 0.75, 0.5)
    overall = report.metrics["overall_valid"]
    assert overall.confusion.model_dump() == {"tp": 4, "fp": 2, "tn": 2, "fn": 1}
    assert report.metrics["incorrect_parameter_type"].confusion.model_dump() == {"tp": 1, "fp": 0, "tn": 5, "fn": 0}
    assert report.excluded == {
        "error": 0,
        f"judge_error:{HAL}": 1,
        **{f"judge_error:{name}": 1 for name in SEMANTIC_CHECKS if name != HAL},
    }


async def test_sweep_covers_every_threshold_and_cutoff_with_the_exact_counts(labelled_file):
    config = ReflectionConfig(judge=judge_config())
    with ScriptedJudge():
        observations = await observe(read_labeled(labelled_file), config=config)
    sweep = {
        (row.threshold, row.confidence_cutoff): (row.tp, row.fp, row.tn, row.fn)
        for row in calibrate(observations, config).metrics[HAL].sweep
    }
    assert len(sweep) == 5 * 6
    assert sweep[1, 0.0] == (0, 0, 4, 4)  # threshold 1 never blocks
    assert sweep[2, 0.0] == (1, 0, 4, 3)
    assert sweep[3, 0.0] == (2, 1, 3, 2)
    assert sweep[5, 0.0] == (4, 2, 2, 0)
    assert sweep[3, 0.6] == (2, 0, 4, 2)  # A4's low-confidence score no longer blocks
    assert sweep[5, 0.6] == (4, 1, 3, 0)
    assert sweep[4, 0.9] == (2, 1, 3, 2)  # nor A7's (0.8)


async def test_suggestions_for_best_f1_and_for_a_false_block_target(labelled_file):
    config = ReflectionConfig(judge=judge_config())
    with ScriptedJudge():
        observations = await observe(read_labeled(labelled_file), config=config)
    best = calibrate(observations, config)
    assert best.thresholds[HAL] == 5 and best.uncertain_below == 0.6
    assert best.metrics[HAL].suggested_threshold == 5
    assert best.metrics["overall_valid"].suggested_threshold == {
        "thresholds": best.thresholds,
        "uncertain_below": 0.6,
        "target": None,
        "precision": 0.8333,
        "recall": 1.0,
        "false_block_rate": 0.25,
        "met_target": True,
    }
    strict = calibrate(observations, config, max_false_block=0.0)
    assert strict.thresholds[HAL] == 3 and strict.uncertain_below == 0.6
    suggested = strict.metrics["overall_valid"].suggested_threshold
    assert (suggested["precision"], suggested["recall"], suggested["false_block_rate"]) == (1.0, 0.6, 0.0)
    # checks with no invalid labels keep the config's thresholds
    assert {k: v for k, v in strict.thresholds.items() if k != HAL} == {
        k: v for k, v in config.thresholds.items() if k != HAL
    }
    assert "uncertain_below: 0.6\n" in strict.snippet() and f"  {HAL}: 3\n" in strict.snippet()


def observation(rid: str, valid: bool, **scores: int) -> Observation:
    checks = {name: score >= 3 for name, score in scores.items()} if not valid else {}
    return Observation(
        row=LabeledRow(rid, {}, valid, checks),
        static_passed=dict.fromkeys(STATIC_CHECKS, True),
        scores={name: ((score, 0.9),) for name, score in scores.items()},
    )


def test_a_target_the_checks_meet_one_by_one_but_not_together_lowers_a_threshold():
    a, b = "general_hallucination_check", "function_selection_appropriateness"
    observations = [
        observation("v1", True, **{a: 2, b: 5}),  # a false block by a alone
        observation("v2", True, **{a: 5, b: 2}),  # a false block by b alone
        observation("v3", True, **{a: 5, b: 5}),
        observation("v4", True, **{a: 5, b: 5}),
        observation("i1", False, **{a: 2, b: 5}),
        observation("i2", False, **{a: 5, b: 2}),
        observation("i3", False, **{a: 2, b: 2}),
    ]
    config = ReflectionConfig(thresholds={a: 3, b: 3})
    # Each check alone blocks 1 of 4 valid calls (0.25); together they block 2 (0.5).
    report = calibrate(observations, config, max_false_block=0.25)
    overall = report.metrics["overall_valid"].suggested_threshold
    assert overall["false_block_rate"] == 0.25 and overall["met_target"] is True
    assert sorted([report.thresholds[a], report.thresholds[b]]) == [2, 3]


def test_rerun_asks_the_judge_nothing_and_writes_exactly_the_named_fields(tmp_path, labelled_file, config_file):
    report_path, snippet_path = tmp_path / "report.json", tmp_path / "suggested.yaml"
    args = [
        "calibrate",
        str(labelled_file),
        "-o",
        str(report_path),
        "--config",
        str(config_file),
        "--snippet",
        str(snippet_path),
    ]
    with ScriptedJudge() as judge:
        first = runner.invoke(app, args)
        asked = judge.requests
        second = runner.invoke(app, [*args, "--max-false-block", "0"])
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert asked == 8 + 2  # 8 rows answered once; A10 failed twice (max_attempts 2)
    assert judge.requests == asked + 2  # the rerun: cache hits, except the row whose judge failed
    assert "10 judge requests, 0 cache hits" in first.stderr and "2 judge requests, 8 cache hits" in second.stderr
    report = json.loads(report_path.read_text())
    assert list(report) == ["overall_valid", "incorrect_parameter_type", HAL]
    for entry in report.values():
        assert list(entry) == ["precision", "recall", "false_block_rate", "confusion", "sweep", "suggested_threshold"]
        assert list(entry["confusion"]) == ["tp", "fp", "tn", "fn"]
    assert report[HAL]["suggested_threshold"] == 3  # the rerun's target: no false block
    assert snippet_path.read_text() in second.stdout
    assert f"  {HAL}: 3\n" in snippet_path.read_text()
    assert "overall_valid" in second.stdout and "4 -> 3" in second.stdout and "snippet below" in second.stdout


@pytest.mark.slow
def test_plots_write_one_png_per_swept_metric(tmp_path, labelled_file, config_file):
    pytest.importorskip("matplotlib", reason="the plots extra (matplotlib) is not installed")
    with ScriptedJudge():
        result = runner.invoke(
            app,
            [
                "calibrate",
                str(labelled_file),
                "-o",
                str(tmp_path / "r.json"),
                "--config",
                str(config_file),
                "--plots",
                str(tmp_path / "plots"),
            ],
        )
    assert result.exit_code == 0, result.output
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["general_hallucination_check.png", "overall_valid.png"]
    assert (tmp_path / "plots" / "overall_valid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unusable_labels_exit_2_listing_every_problem_and_write_nothing(tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = [
        {"id": "ok", "tools": TOOLS, "call": {"name": "refund", "arguments": {}}, "label": {"valid": True}},
        {"id": "no-label", "tools": TOOLS, "call": {"name": "refund", "arguments": {}}},
        {
            "id": "typo",
            "tools": TOOLS,
            "call": {"name": "refund", "arguments": {}},
            "label": {"valid": False, "checks": {"hallucination": False}},
        },
        {
            "id": "contradiction",
            "tools": TOOLS,
            "call": {"name": "refund", "arguments": {}},
            "label": {"valid": True, "checks": {HAL: False}},
        },
        {"id": "ok", "tools": TOOLS, "call": {"name": "refund", "arguments": {}}, "label": {"valid": True}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    result = runner.invoke(app, ["calibrate", str(path), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 2
    assert "6 unusable" not in result.stderr and "5 unusable labelled row(s)" in result.stderr
    for expected in (
        "line 2 (id 'no-label'): no \"label\" object",
        "unknown check(s) ['hallucination']",
        "labelled valid but with failing check(s) ['general_hallucination_check']",
        "line 5: duplicate id 'ok'",
        "line 6:",
    ):
        assert expected in result.stderr
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(LabelError, match="no labelled rows"):
        read_labeled(_empty(tmp_path))


def test_a_judge_that_cannot_answer_at_all_exits_2_without_a_report(tmp_path, labelled_file):
    result = runner.invoke(
        app,
        [
            "calibrate",
            str(labelled_file),
            "-o",
            str(tmp_path / "r.json"),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "nobody",
            "--no-cache",
        ],
    )
    assert result.exit_code == 2
    assert "error: judge http://127.0.0.1:9/v1/chat/completions: connection refused" in result.stderr
    assert not (tmp_path / "r.json").exists()


def test_plots_without_matplotlib_exit_2_before_reflecting_anything(tmp_path, labelled_file, config_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plots extra were not installed
    with ScriptedJudge() as judge:
        result = runner.invoke(
            app,
            [
                "calibrate",
                str(labelled_file),
                "-o",
                str(tmp_path / "r.json"),
                "--config",
                str(config_file),
                "--plots",
                str(tmp_path / "plots"),
            ],
        )
    assert result.exit_code == 2 and judge.requests == 0
    assert "--plots needs matplotlib: pip install 'toolcall-reflection[plots]'" in result.stderr


def test_row_ids_reach_the_terminal_without_control_characters(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"id": "\x1b[2Jboom", "tools": TOOLS, "call": {"name": "refund", "arguments": {}}}) + "\n"
    )
    result = runner.invoke(app, ["calibrate", str(path), "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 2 and "boom" in result.stderr and "\x1b" not in result.stderr


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    return path


def test_the_shipped_set_covers_every_check_and_its_static_labels_agree_with_the_static_stage(tmp_path):
    rows = read_labeled(SHIPPED)
    assert len(rows) >= 80
    failing = {name for row in rows for name, passes in row.checks.items() if not passes}
    assert set(SEMANTIC_CHECKS) <= failing
    assert sum(row.valid for row in rows) >= 30
    result = runner.invoke(app, ["calibrate", str(SHIPPED), "-o", str(tmp_path / "r.json")])  # no judge: static only
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    static = [name for name in report if name in STATIC_CHECKS]
    assert len(static) >= 6
    for name in static:
        assert report[name]["confusion"]["fp"] == 0 and report[name]["confusion"]["fn"] == 0, name


def test_a_report_that_is_the_labelled_file_through_a_hard_link_is_refused(tmp_path, labelled_file):
    link = tmp_path / "also-labels.json"
    os.link(labelled_file, link)
    before = labelled_file.read_bytes()
    result = runner.invoke(app, ["calibrate", str(labelled_file), "-o", str(link)])
    assert result.exit_code == 2 and "is the input file" in result.stderr
    assert labelled_file.read_bytes() == before


# --- the plots: what is drawn, read back from the matplotlib objects ---------------------------


def plotted(report):
    """metric -> (axes, {label: Line2D}) of each calibration figure."""
    pytest.importorskip("matplotlib", reason="the plots extra (matplotlib) is not installed")
    from reflection.calibrate import calibration_figures

    out = {}
    for name, figure in calibration_figures(report).items():
        (axes,) = figure.axes
        out[name] = (axes, {line.get_label(): line for line in axes.get_lines()})
    return out


def few_blocks_report():
    """A check that blocks nothing at thresholds 1 to 3 (every score is 3 or more)."""

    def invalid(rid, score):
        return Observation(
            row=LabeledRow(rid, {}, False, {HAL: False}),
            static_passed=dict.fromkeys(STATIC_CHECKS, True),
            scores={HAL: ((score, 0.9),)},
        )

    observations = [
        observation("v1", True, **{HAL: 5}),
        observation("v2", True, **{HAL: 3}),
        invalid("i1", 3),
        invalid("i2", 4),
    ]
    return calibrate(observations, ReflectionConfig(checks=[HAL], thresholds={HAL: 4}))


def test_undefined_precision_is_a_gap_and_a_shaded_band_never_zero():
    import math

    from reflection.calibrate import UNDEFINED_LABEL

    report = few_blocks_report()
    sweep = [row for row in report.metrics[HAL].sweep if row.confidence_cutoff == 0.0]
    undefined = [row.threshold for row in sweep if row.precision is None]
    assert undefined == [1, 2, 3]  # nothing scores below 3: nothing blocked
    axes, lines = plotted(report)[HAL]
    xs, ys = list(lines["precision"].get_xdata()), list(lines["precision"].get_ydata())
    assert xs == [row.threshold for row in sweep]
    for x, y, row in zip(xs, ys, sweep):
        assert math.isnan(y) if row.precision is None else y == row.precision
    bands = [p for p in axes.patches if p.get_label() == UNDEFINED_LABEL]
    assert len(bands) == 1 and len(axes.patches) == len(undefined)  # one band per threshold, one legend entry
    centres = sorted(p.get_x() + p.get_width() / 2 for p in axes.patches)  # axvspan draws a Rectangle
    assert [round(c, 6) for c in centres] == undefined
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert UNDEFINED_LABEL in legend


def test_the_lines_differ_in_style_and_marker_and_let_the_others_show_through():
    axes, lines = plotted(few_blocks_report())[HAL]
    drawn = [lines[name] for name in ("precision", "recall", "false-block rate")]
    assert len({(line.get_linestyle(), line.get_marker()) for line in drawn}) == 3
    assert all(line.get_alpha() is not None and line.get_alpha() < 1 for line in drawn)
    assert len({line.get_markersize() for line in drawn}) >= 2  # a smaller marker sits inside a larger one
    assert lines["recall"].get_markerfacecolor() == "none"  # hollow: the precision marker shows through
    legend = axes.get_legend()
    assert legend.get_bbox_to_anchor().y0 < axes.get_window_extent().y0  # below the plot, covering no line


def test_every_plot_marks_its_suggested_threshold():
    a, b = "general_hallucination_check", "function_selection_appropriateness"
    observations = [
        observation("v1", True, **{a: 2, b: 5}),
        observation("v2", True, **{a: 5, b: 2}),
        observation("v3", True, **{a: 5, b: 5}),
        observation("v4", True, **{a: 5, b: 5}),
        observation("i1", False, **{a: 2, b: 5}),
        observation("i2", False, **{a: 5, b: 2}),
        observation("i3", False, **{a: 2, b: 2}),
    ]
    report = calibrate(observations, ReflectionConfig(checks=[a, b], thresholds={a: 3, b: 3}), max_false_block=0.25)
    figures = plotted(report)
    assert set(figures) == {"overall_valid", a, b}
    for name in (a, b):
        _, lines = figures[name]
        t = report.thresholds[name]
        (marker,) = [line for label, line in lines.items() if label.startswith("suggested")]
        assert list(marker.get_xdata()) == [t, t] and marker.get_label() == f"suggested threshold ({t})"
    _, lines = figures["overall_valid"]
    marks = {label: line for label, line in lines.items() if label.startswith("suggested")}
    assert sorted({line.get_xdata()[0] for line in marks.values()}) == sorted(set(report.thresholds.values()))
    assert all(any(check in label for label in marks) for check in (a, b))  # each line names its checks


def test_a_line_with_no_value_at_any_threshold_says_why_in_its_legend():
    def valid(rid, score):  # labelled for the check, as passing it
        return Observation(
            row=LabeledRow(rid, {}, True, {HAL: True}),
            static_passed=dict.fromkeys(STATIC_CHECKS, True),
            scores={HAL: ((score, 0.9),)},
        )

    observations = [valid("v1", 5), valid("v2", 2)]
    _, lines = plotted(calibrate(observations, ReflectionConfig(checks=[HAL])))[HAL]
    assert "recall: undefined (no invalid call labelled)" in lines
    assert "false-block rate" in lines and "precision" in lines


def test_one_suggested_threshold_for_every_check_is_one_line_on_the_overall_plot():
    _, lines = plotted(few_blocks_report())["overall_valid"]
    marks = [label for label in lines if label.startswith("suggested")]
    assert len(marks) == 1 and marks[0].endswith("every judge check)")
