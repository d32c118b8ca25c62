"""Calibrate the verdict on labelled calls: how often does it block what it should, and at
which thresholds would it do better?

Labelled rows are input rows plus a label, `{"id", "tools", "history", "call", "label":
{"valid": bool, "checks": {"<check>": bool, ...}}}` (a check's label is True when it should
pass). Every row is reflected once, through the judge cache, and the judge's raw scores and
confidences are kept, so the sweep over thresholds 1-5 and confidence cut-offs costs no judge
request (and neither does a rerun of the whole command).

Blocking an invalid call is the positive class: `tp` is an invalid call blocked, `fp` a valid
call blocked (a false block), `tn` a valid call let through, `fn` an invalid call let through.
A semantic check blocks when its score is below its threshold and the judge's confidence is at
least the cut-off (`uncertain_below`): a check the judge is unsure of blocks nothing here, and
in the gate it is decided by the judge-failure policy. A check the judge failed to answer is
left out of that check's counts, and out of `overall_valid`'s unless something else blocks
the call.

    observations = await observe(read_labeled("labeled.jsonl"), config=config, cache="cache.sqlite")
    report = calibrate(observations, config, max_false_block=0.02)
    report.to_json()   # {"overall_valid": {...}, "<check>": {...}}
    print(report.snippet())
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from reflection._text import shorten
from reflection.batch.inputs import read_source
from reflection.config import ReflectionConfig
from reflection.errors import LabelError
from reflection.model import SEMANTIC_CHECKS, STATIC_CHECKS
from reflection.rows import RowError, read_row, row_id

if TYPE_CHECKING:
    from reflection.judge import JudgeCache

__all__ = [
    "CONFIDENCE_CUTOFFS",
    "THRESHOLDS",
    "CalibrationReport",
    "Confusion",
    "LabelError",
    "LabeledRow",
    "MetricCalibration",
    "Observation",
    "SweepRow",
    "calibrate",
    "calibration_figures",
    "observe",
    "read_labeled",
    "write_plots",
]

THRESHOLDS: tuple[int, ...] = (1, 2, 3, 4, 5)
"""The thresholds swept: a check passes when its 1-5 score reaches its threshold (1 never blocks)."""
CONFIDENCE_CUTOFFS: tuple[float, ...] = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The confidence cut-offs swept (`uncertain_below`; 0 means no cut-off), plus the config's own."""

_KNOWN_CHECKS = frozenset(STATIC_CHECKS) | frozenset(SEMANTIC_CHECKS)
_MAX_PROBLEMS = 20


# --- labelled rows in ------------------------------------------------------------------------


@dataclass(frozen=True)
class LabeledRow:
    """One labelled call: the input row to reflect and what the verdict should be."""

    id: str
    row: dict[str, Any]
    """`{"id", "call", "tools", "history"}`, as `reflect_dataset` takes it."""
    valid: bool
    checks: dict[str, bool] = field(default_factory=dict)
    """Check name -> True when that check should pass."""


def read_labeled(path: str | Path) -> list[LabeledRow]:
    """Read a JSON Lines file of labelled rows; raise `LabelError` listing what is wrong.

    Every row needs a unique id, a call (`call` or `tool_calls`) and a `label` with a boolean
    `valid` and, optionally, `checks` mapping known check names to booleans. A row labelled
    valid cannot have a failing check label.
    """
    rows: list[LabeledRow] = []
    problems: list[str] = []
    seen: set[str] = set()
    for source in read_source(path, "jsonl"):
        where = f"line {source.position}"
        if source.error is not None:
            problems.append(f"{where}: {source.error}")
            continue
        rid = row_id(source.raw, source.position)
        try:
            row = read_row(source.raw, source.position)
        except RowError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if rid in seen:
            problems.append(f"{where}: duplicate id {rid!r}; give every labelled row a unique id")
            continue
        seen.add(rid)
        label, problem = _read_label(source.raw.get("label"))
        if problem:
            problems.append(f"{where} (id {rid!r}): {problem}")
            continue
        valid, checks = label
        rows.append(
            LabeledRow(rid, {"id": rid, "call": row.call, "tools": row.tools, "history": row.history}, valid, checks)
        )
    if problems:
        shown = problems[:_MAX_PROBLEMS]
        more = f"\n... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise LabelError(f"{path}: {len(problems)} unusable labelled row(s):\n" + "\n".join(shown) + more)
    if not rows:
        raise LabelError(f"{path}: no labelled rows")
    return rows


def _read_label(label: Any) -> tuple[tuple[bool, dict[str, bool]], str | None]:
    """(valid, checks) and None, or a problem sentence."""
    nothing: tuple[bool, dict[str, bool]] = (False, {})
    example = '"label": {"valid": false, "checks": {"general_hallucination_check": false}}'
    if not isinstance(label, Mapping):
        return nothing, f'no "label" object; add e.g. {example}'
    valid = label.get("valid")
    if not isinstance(valid, bool):
        return nothing, f'"label.valid" must be true or false, got {shorten(repr(valid), 40, ellipsis="...")}'
    checks = label.get("checks", {})
    if not isinstance(checks, Mapping):
        return nothing, '"label.checks" must be an object mapping check names to true (passes) or false'
    unknown = sorted(str(name) for name in checks if name not in _KNOWN_CHECKS)
    if unknown:
        return nothing, f'unknown check(s) {unknown} in "label.checks"; known: {sorted(_KNOWN_CHECKS)}'
    bad = sorted(name for name, value in checks.items() if not isinstance(value, bool))
    if bad:
        return nothing, f'"label.checks" values must be true or false, not for {bad}'
    failing = sorted(name for name, value in checks.items() if value is False)
    if valid and failing:
        return nothing, f"labelled valid but with failing check(s) {failing}; a valid call passes every check"
    return (valid, dict(checks)), None


# --- reflecting them ------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What reflection found for one labelled row: the static checks and each judge check's
    (score, confidence) per call, or the reason the row or a check could not be reflected."""

    row: LabeledRow
    static_passed: dict[str, bool] = field(default_factory=dict)
    """Static check -> passed on every call of the row."""
    scores: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    """Judge check -> (score, confidence) of each call it was answered for."""
    judge_errors: frozenset[str] = frozenset()
    """Judge checks that failed (after retries) on some call of the row."""
    error: str | None = None
    """Why the row could not be reflected at all (an error row)."""
    judge_requests: int = 0


async def observe(
    rows: Sequence[LabeledRow],
    *,
    config: ReflectionConfig,
    cache: JudgeCache | str | Path | None = None,
    concurrency: int | None = None,
    http_client: Any = None,
) -> list[Observation]:
    """Reflect every labelled row (through `cache`, a `JudgeCache` or a SQLite path) and keep
    what the calibration needs; observations come back in the order of `rows`."""
    from reflection.batch import reflect_dataset  # batch imports the pipeline; keep import light

    by_id = {row.id: row for row in rows}
    found: dict[str, Observation] = {}
    async for out in reflect_dataset(
        [row.row for row in rows], config=config, cache=cache, concurrency=concurrency, http_client=http_client
    ):
        found[out["id"]] = _observation(by_id[out["id"]], out)
    return [found[row.id] for row in rows]


def _observation(row: LabeledRow, out: Mapping[str, Any]) -> Observation:
    if "error" in out:
        return Observation(row=row, error=str(out["error"]))
    static = {name: all(r["static"]["checks"][name]["passed"] for r in out["results"]) for name in STATIC_CHECKS}
    scores: dict[str, list[tuple[int, float]]] = {}
    errors = set()
    for result in out["results"]:
        for name, check in (result.get("semantic") or {}).items():
            if check["status"] == "error":
                errors.add(name)
            elif check.get("score") is not None:
                scores.setdefault(name, []).append((int(check["score"]), float(check.get("confidence") or 0.0)))
    requests = int((out.get("usage") or {}).get("requests") or 0)
    return Observation(
        row=row,
        static_passed=static,
        scores={k: tuple(v) for k, v in scores.items()},
        judge_errors=frozenset(errors),
        judge_requests=requests,
    )


# --- the report -----------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Confusion(_Model):
    """Counts with blocking an invalid call as the positive class."""

    tp: int
    """Invalid calls blocked."""
    fp: int
    """Valid calls blocked (false blocks)."""
    tn: int
    """Valid calls let through."""
    fn: int
    """Invalid calls let through."""

    @property
    def precision(self) -> float | None:
        """Of the blocked calls, the share that were invalid (None when nothing was blocked)."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        """Of the invalid calls, the share blocked (None when there were none)."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def false_block_rate(self) -> float | None:
        """Of the valid calls, the share blocked (None when there were none)."""
        return _ratio(self.fp, self.fp + self.tn)

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall (0 when either is 0 or undefined)."""
        p, r = self.precision or 0.0, self.recall or 0.0
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def _ratio(a: int, b: int) -> float | None:
    return None if b == 0 else round(a / b, 4)


class SweepRow(_Model):
    """The counts at one threshold and confidence cut-off."""

    threshold: int
    confidence_cutoff: float
    tp: int
    fp: int
    tn: int
    fn: int
    precision: float | None
    recall: float | None
    false_block_rate: float | None
    f1: float

    @classmethod
    def of(cls, threshold: int, cutoff: float, confusion: Confusion) -> SweepRow:
        """A sweep row from a confusion matrix."""
        return cls(
            threshold=threshold,
            confidence_cutoff=cutoff,
            **confusion.model_dump(),
            precision=confusion.precision,
            recall=confusion.recall,
            false_block_rate=confusion.false_block_rate,
            f1=round(confusion.f1, 4),
        )


class MetricCalibration(_Model):
    """One check's (or `overall_valid`'s) calibration: its counts under the given config, the
    sweep, and the suggestion.

    `suggested_threshold` is an int for a judge check (its threshold in the suggested config),
    None for a static check (it has no threshold), and for `overall_valid` the suggested
    config with what it would give: `{"thresholds", "uncertain_below", "target",
    "precision", "recall", "false_block_rate", "met_target"}`.
    """

    precision: float | None
    recall: float | None
    false_block_rate: float | None
    confusion: Confusion
    sweep: tuple[SweepRow, ...] = ()
    """Judge checks: every threshold 1-5 at every cut-off. `overall_valid`: one threshold for
    every judge check at once, at every cut-off. Static checks: empty."""
    suggested_threshold: int | dict[str, Any] | None = None

    @classmethod
    def of(cls, confusion: Confusion, sweep: Iterable[SweepRow] = (), suggested: Any = None) -> MetricCalibration:
        """Build it from the counts under the current config."""
        return cls(
            precision=confusion.precision,
            recall=confusion.recall,
            false_block_rate=confusion.false_block_rate,
            confusion=confusion,
            sweep=tuple(sweep),
            suggested_threshold=suggested,
        )


class CalibrationReport(_Model):
    """`overall_valid` and each labelled check's calibration, plus what the run left out."""

    metrics: dict[str, MetricCalibration]
    """`overall_valid` first, then the labelled checks in report order."""
    thresholds: dict[str, int]
    """The suggested threshold of every judge check (unlabelled ones keep the config's)."""
    uncertain_below: float | None
    """The suggested confidence cut-off (None: no cut-off)."""
    target: float | None
    """The false-block target the suggestion was made for (None: best F1)."""
    config_thresholds: dict[str, int]
    config_uncertain_below: float | None
    """The config's thresholds and cut-off, at which the counts were taken."""
    rows: int
    excluded: dict[str, int]
    """Rows left out: `error` (could not be reflected) and `judge_error:<check>`."""
    judge_requests: int

    def to_json(self) -> dict[str, Any]:
        """The JSON report: `{"overall_valid": {...}, "<check>": {...}}`, each with `precision`,
        `recall`, `false_block_rate`, `confusion`, `sweep` and `suggested_threshold`."""
        return {name: metric.model_dump(mode="json") for name, metric in self.metrics.items()}

    def snippet(self) -> str:
        """The suggestion as a YAML config snippet to paste into a config file."""
        overall = self.metrics["overall_valid"].suggested_threshold
        assert isinstance(overall, dict)
        goal = f"false-block rate <= {self.target}" if self.target is not None else "best F1"
        lines = [
            f"# reflection calibrate: suggested for {goal} on {self.rows} labelled rows",
            f"# overall_valid then: precision {_num(overall['precision'])}, recall {_num(overall['recall'])}, "
            f"false-block rate {_num(overall['false_block_rate'])}"
            + ("" if overall["met_target"] else " (the target is not met: see the report)"),
            "thresholds:",
            *(f"  {name}: {value}" for name, value in self.thresholds.items()),
            f"uncertain_below: {'null' if self.uncertain_below is None else self.uncertain_below}",
        ]
        return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# --- the computation: one bit per row ----------------------------------------------------------


class _Masks:
    """Which rows block, are labelled, and are invalid, as Python ints used as bit sets (bit i
    is row i), so a sweep point costs a few integer operations whatever the number of rows."""

    def __init__(self, observations: Sequence[Observation], checks: Sequence[str], cutoffs: Sequence[float]):
        self.checks = tuple(checks)
        self.cutoffs = tuple(cutoffs)
        bit = [1 << i for i in range(len(observations))]
        self.rows = 0
        self.invalid = 0
        self.static_block = 0
        self.label: dict[str, int] = {}
        self.label_invalid: dict[str, int] = {}
        self.static_failed: dict[str, int] = dict.fromkeys(STATIC_CHECKS, 0)
        self.error: dict[str, int] = dict.fromkeys(checks, 0)
        self.scored: dict[str, int] = dict.fromkeys(checks, 0)
        """Rows the judge answered the check for."""
        self.block: dict[tuple[str, int, float], int] = {}
        for i, obs in enumerate(observations):
            if obs.error is not None:
                continue
            self.rows |= bit[i]
            if not obs.row.valid:
                self.invalid |= bit[i]
            for name, passed in obs.static_passed.items():
                if not passed:
                    self.static_failed[name] |= bit[i]
                    self.static_block |= bit[i]
            # A call labelled valid passes every check, whether or not its checks are listed.
            labels = dict.fromkeys(_KNOWN_CHECKS, True) if obs.row.valid else obs.row.checks
            for name, passes in labels.items():
                self.label[name] = self.label.get(name, 0) | bit[i]
                if not passes:
                    self.label_invalid[name] = self.label_invalid.get(name, 0) | bit[i]
            for name in checks:
                if name in obs.judge_errors:
                    self.error[name] |= bit[i]
                elif name in obs.scores:
                    self.scored[name] |= bit[i]
                for t, c in itertools.product(THRESHOLDS, self.cutoffs):
                    if any(score < t and confidence >= c for score, confidence in obs.scores.get(name, ())):
                        self.block[name, t, c] = self.block.get((name, t, c), 0) | bit[i]

    def check(self, name: str, threshold: int, cutoff: float) -> Confusion:
        """A judge check's own counts, over the rows labelled for it that the judge answered."""
        return _confusion(
            self.block.get((name, threshold, cutoff), 0),
            self.label.get(name, 0) & self.scored[name],
            self.label_invalid.get(name, 0),
        )

    def static(self, name: str) -> Confusion:
        """A static check's counts over the rows labelled for it."""
        return _confusion(
            self.static_failed[name], self.label.get(name, 0) & self.rows, self.label_invalid.get(name, 0)
        )

    def overall(self, thresholds: Mapping[str, int], cutoff: float) -> Confusion:
        """`overall_valid`'s counts: blocked when static fails or any judge check blocks; a row
        nothing blocks but with a judge error has no verdict and is left out."""
        blocked = self.static_block
        errors = 0
        for name in self.checks:
            blocked |= self.block.get((name, thresholds[name], cutoff), 0)
            errors |= self.error[name]
        decided = self.rows & ~(errors & ~blocked)
        return _confusion(blocked, decided, self.invalid)


def _confusion(blocked: int, among: int, invalid: int) -> Confusion:
    blocked &= among
    invalid &= among
    valid = among & ~invalid
    return Confusion(
        tp=(blocked & invalid).bit_count(),
        fp=(blocked & valid).bit_count(),
        tn=(valid & ~blocked).bit_count(),
        fn=(invalid & ~blocked).bit_count(),
    )


# --- choosing -------------------------------------------------------------------------------


def _rank(confusion: Confusion, target: float | None) -> tuple[float, ...]:
    """Bigger is better. With a target: meet it, then the most invalid calls blocked, then
    precision; without: best F1, then fewest false blocks."""
    fbr = confusion.false_block_rate or 0.0
    if target is not None:
        return (float(fbr <= target + 1e-12), confusion.recall or 0.0, confusion.precision or 0.0, -fbr)
    return (confusion.f1, -fbr, confusion.recall or 0.0)


def _best_threshold(masks: _Masks, name: str, cutoff: float, target: float | None, current: int) -> int:
    # Ties go to the config's own threshold, then the nearest to it (no change without evidence).
    return max(THRESHOLDS, key=lambda t: (_rank(masks.check(name, t, cutoff), target), -abs(t - current)))


def _suggest(
    masks: _Masks, current: Mapping[str, int], labelled: Sequence[str], target: float | None, current_cutoff: float
) -> tuple[dict[str, int], float]:
    """Per cut-off: each labelled judge check's best threshold on its own labels; with a target,
    then lower thresholds (the check whose step down drops the most false blocks first) until
    `overall_valid` meets it. Then the cut-off whose `overall_valid` ranks best."""
    options = []
    for cutoff in masks.cutoffs:
        thresholds = dict(current)
        for name in labelled:
            thresholds[name] = _best_threshold(masks, name, cutoff, target, current[name])
        if target is not None:
            _lower_until_met(masks, thresholds, cutoff, target)
        rank = _rank(masks.overall(thresholds, cutoff), target)
        options.append((rank, -abs(cutoff - current_cutoff), thresholds, cutoff))
    _, _, thresholds, cutoff = max(options, key=lambda option: option[:2])
    return thresholds, cutoff


def _lower_until_met(masks: _Masks, thresholds: dict[str, int], cutoff: float, target: float) -> None:
    while (masks.overall(thresholds, cutoff).false_block_rate or 0.0) > target + 1e-12:
        steps = []
        for name in masks.checks:
            if thresholds[name] > 1:
                trial = {**thresholds, name: thresholds[name] - 1}
                confusion = masks.overall(trial, cutoff)
                steps.append((confusion.fp, -confusion.tp, masks.checks.index(name), name))
        if not steps:
            return  # only static failures are left; no threshold can lower them
        thresholds[min(steps)[3]] -= 1


def calibrate(
    observations: Sequence[Observation], config: ReflectionConfig, *, max_false_block: float | None = None
) -> CalibrationReport:
    """The calibration report for reflected labelled rows.

    Counts are for `config`'s thresholds and `uncertain_below`. The suggestion maximises the
    share of invalid calls blocked with a false-block rate (valid calls blocked) of at most
    `max_false_block`, for `overall_valid` and each labelled judge check; or, without a
    target, the F1 score of blocking invalid calls.
    """
    if max_false_block is not None and not 0 <= max_false_block <= 1:
        raise ValueError(f"max_false_block must be between 0 and 1, got {max_false_block}")
    judge_checks = [name for name in SEMANTIC_CHECKS if name in config.checks]
    current_cutoff = config.uncertain_below or 0.0
    masks = _Masks(observations, judge_checks, sorted({*CONFIDENCE_CUTOFFS, current_cutoff}))
    # Report (and tune) the checks some row names; a valid row also counts for them, as a pass.
    named = {name for obs in observations for name in obs.row.checks}
    labelled = [name for name in judge_checks if name in named and masks.label.get(name, 0) & masks.scored[name]]
    current = {name: config.thresholds[name] for name in judge_checks}
    thresholds, cutoff = _suggest(masks, current, labelled, max_false_block, current_cutoff)
    at_suggestion = masks.overall(thresholds, cutoff)

    metrics: dict[str, MetricCalibration] = {}
    overall_sweep = (
        [
            SweepRow.of(t, c, masks.overall(dict.fromkeys(judge_checks, t), c))
            for c, t in itertools.product(masks.cutoffs, THRESHOLDS)
        ]
        if judge_checks
        else []
    )
    fbr = at_suggestion.false_block_rate
    metrics["overall_valid"] = MetricCalibration.of(
        masks.overall(current, current_cutoff),
        overall_sweep,
        {
            "thresholds": thresholds,
            "uncertain_below": cutoff or None,
            "target": max_false_block,
            "precision": at_suggestion.precision,
            "recall": at_suggestion.recall,
            "false_block_rate": fbr,
            "met_target": max_false_block is None or (fbr or 0.0) <= max_false_block + 1e-12,
        },
    )
    for name in STATIC_CHECKS:
        if name in named and masks.label.get(name, 0) & masks.rows:
            metrics[name] = MetricCalibration.of(masks.static(name))
    for name in labelled:
        sweep = [SweepRow.of(t, c, masks.check(name, t, c)) for c, t in itertools.product(masks.cutoffs, THRESHOLDS)]
        metrics[name] = MetricCalibration.of(masks.check(name, current[name], current_cutoff), sweep, thresholds[name])

    excluded = {"error": sum(obs.error is not None for obs in observations)}
    for name in judge_checks:
        count = masks.error[name].bit_count()
        if count:
            excluded[f"judge_error:{name}"] = count
    return CalibrationReport(
        metrics=metrics,
        thresholds={name: thresholds[name] for name in judge_checks},
        uncertain_below=cutoff or None,
        target=max_false_block,
        config_thresholds=current,
        config_uncertain_below=current_cutoff or None,
        rows=len(observations),
        excluded=excluded,
        judge_requests=sum(obs.judge_requests for obs in observations),
    )


# --- plots ----------------------------------------------------------------------------------


# Each line has its own colour, line style and marker, and is slightly transparent, so lines
# that coincide (precision and recall are often equal) stay visible one over the other.
_LINES: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "precision",
        {"color": "#0969da", "linestyle": "-", "marker": "o", "markersize": 8, "linewidth": 2.2, "zorder": 3},
    ),
    (
        "recall",
        {
            "color": "#cf222e",
            "linestyle": "--",
            "marker": "s",
            "markersize": 6,
            "linewidth": 1.8,
            "zorder": 4,
            "markerfacecolor": "none",
            "markeredgewidth": 1.6,
        },
    ),
    (
        "false-block rate",
        {"color": "#bf8700", "linestyle": ":", "marker": "^", "markersize": 6, "linewidth": 1.8, "zorder": 5},
    ),
)
_ALPHA = 0.8
UNDEFINED_LABEL = "precision undefined (nothing blocked)"
"""The legend label of the bands where precision has no value: no call was blocked."""
_NEVER_DEFINED = {
    "precision": "nothing blocked at any threshold",
    "recall": "no invalid call labelled",
    "false-block rate": "no valid call labelled",
}


def calibration_figures(report: CalibrationReport) -> dict[str, Any]:
    """One matplotlib `Figure` per metric with a sweep (`overall_valid`, then each labelled judge
    check): threshold against precision, recall and false-block rate at the suggested
    confidence cut-off, with the suggested threshold marked. Where nothing is blocked,
    precision is undefined: its line has a gap there and the threshold is shaded, never drawn
    as 0. Needs matplotlib (`toolcall-reflection[plots]`)."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
    except ImportError as exc:
        raise ImportError("--plots needs matplotlib: pip install 'toolcall-reflection[plots]'") from exc
    cutoff = report.uncertain_below or 0.0
    figures: dict[str, Any] = {}
    for name, metric in report.metrics.items():
        rows = [row for row in metric.sweep if math.isclose(row.confidence_cutoff, cutoff)]
        if not rows:
            continue
        figure = Figure(figsize=(5.6, 4.2), dpi=100, layout="constrained")
        axes = figure.add_subplot()
        xs = [row.threshold for row in rows]
        values = {
            "precision": [row.precision for row in rows],
            "recall": [row.recall for row in rows],
            "false-block rate": [row.false_block_rate for row in rows],
        }
        for label, style in _LINES:
            if all(v is None for v in values[label]):  # nothing to draw: say why instead of a bare legend entry
                label = f"{label}: undefined ({_NEVER_DEFINED[label]})"
            axes.plot(
                xs,
                [math.nan if v is None else v for v in values[label.split(":")[0]]],
                label=label,
                alpha=_ALPHA,
                **style,
            )
        undefined = [x for x, v in zip(xs, values["precision"], strict=True) if v is None]
        for i, x in enumerate(undefined):
            axes.axvspan(
                x - 0.4,
                x + 0.4,
                color="#8c959f",
                alpha=0.15,
                hatch="//",
                linewidth=0,
                label=UNDEFINED_LABEL if i == 0 else None,
            )
        for x, label in _suggested_lines(name, metric.suggested_threshold):
            axes.axvline(x, color="#1f2328", linestyle=(0, (1, 2)), linewidth=1.4, zorder=2, label=label)
        axes.set_xticks(list(THRESHOLDS))
        axes.set_xlim(min(THRESHOLDS) - 0.5, max(THRESHOLDS) + 0.5)
        axes.set_ylim(-0.05, 1.05)
        axes.grid(True, alpha=0.25)
        axes.set_xlabel("threshold (same for every judge check)" if name == "overall_valid" else "threshold")
        axes.set_title(f"{name} (confidence cut-off {cutoff:g})", fontsize=9)
        # Below the plot, so it never covers a line; long labels (the checks of a suggestion) wrap.
        handles, labels = axes.get_legend_handles_labels()
        labels = [textwrap.fill(label, 48) for label in labels]
        columns = 1 if max(map(len, labels)) > 40 else 2
        axes.legend(
            handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=columns
        )
        # A taller figure for a longer legend, so the plot itself keeps its height.
        legend_lines = sum(label.count("\n") + 1 for label in labels) / columns
        figure.set_size_inches(5.6, 3.3 + 0.15 * legend_lines)
        figures[name] = figure
    return figures


def _suggested_lines(name: str, suggested: int | dict[str, Any] | None) -> list[tuple[int, str]]:
    """Where to mark the suggestion: (threshold, legend label). For `overall_valid` the
    suggestion is one threshold per judge check; a line marks each distinct one, naming its checks."""
    if isinstance(suggested, int):
        return [(suggested, f"suggested threshold ({suggested})")]
    thresholds = (suggested or {}).get("thresholds") if name == "overall_valid" else None
    if not isinstance(thresholds, Mapping) or not thresholds:
        return []
    by_value: dict[int, list[str]] = {}
    for check, value in thresholds.items():
        by_value.setdefault(int(value), []).append(str(check))
    if len(by_value) == 1:
        (value,) = by_value
        return [(value, f"suggested threshold ({value}, every judge check)")]
    return [(value, f"suggested {value}: " + ", ".join(checks)) for value, checks in sorted(by_value.items())]


def write_plots(report: CalibrationReport, directory: str | Path) -> list[Path]:
    """Write `calibration_figures(report)` as `<metric>.png` files in `directory`; the paths
    written. Needs matplotlib (`toolcall-reflection[plots]`)."""
    figures = calibration_figures(report)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, figure in figures.items():
        path = directory / f"{name}.png"
        figure.savefig(path)
        written.append(path)
    return written


# --- for the command (`reflection.cli.calibrate`) ------------------------------------------


def print_table(report: CalibrationReport, console: Any) -> None:
    """Print the report as a table (plain text; check names are known names, never row data)."""
    from rich.table import Table

    goal = f"false blocks <= {report.target}" if report.target is not None else "best F1"
    table = Table(
        title=f"{report.rows} labelled rows (invalid = positive); threshold now -> suggested for {goal}",
        title_justify="left",
    )
    for column in ("metric", "tp", "fp", "tn", "fn", "precision", "recall", "false-block", "threshold"):
        table.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
    for name, metric in report.metrics.items():
        c = metric.confusion
        suggested = metric.suggested_threshold
        if isinstance(suggested, int):
            change = f"{report.config_thresholds[name]} -> {suggested}"
        elif name == "overall_valid":
            change = "snippet below"
        else:
            change = "(static)"
        table.add_row(
            name,
            str(c.tp),
            str(c.fp),
            str(c.tn),
            str(c.fn),
            _num(metric.precision),
            _num(metric.recall),
            _num(metric.false_block_rate),
            change,
        )
    console.print(table, markup=False, highlight=False)


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` (UTF-8), creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
