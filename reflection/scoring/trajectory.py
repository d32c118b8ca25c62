"""Trajectory correctness: the tools an agent called against the tools it was expected to call.

Three modes. By default every expected call is paired with its best called call through an
optimal one-to-one assignment (so duplicate expected calls are scored correctly, which a
greedy first-match does not do); `should_consider_ordering` scores a weighted longest common
subsequence; `should_exact_match` needs the same calls in the same order. Called names are
compared after stripping dynamic suffixes (`delegate_to_sql_query_agent_xg7c`), except names
that are declared tools or expected names (see `normalize_tool_name`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from reflection._json import dumps, parse_json
from reflection._text import shorten
from reflection.formats import (
    holds_messages,
    normalize_call,
    normalize_history,
    normalize_tools,
    unwrap_tool_calls,
)
from reflection.model import History, JudgeUsage, ToolCall, ToolInventory
from reflection.scoring._assignment import max_weight_assignment
from reflection.scoring._judged import JudgedScore, ask_score
from reflection.scoring._values import (
    argument_differences,
    argument_similarity,
    json_equal,
    with_defaults,
)

if TYPE_CHECKING:
    from reflection.judge import Judge

__all__ = [
    "CallMatch",
    "TrajectoryCall",
    "TrajectoryScore",
    "atrajectory_correctness",
    "normalize_tool_name",
    "read_trajectory",
    "tool_selection_score",
    "trajectory_correctness",
    "trajectory_from_messages",
]

EvaluationParam = Literal["input_parameters", "output"]
_EVALUATION_PARAMS = ("input_parameters", "output")
# A trailing "_" plus 4 letters/digits with at least one of each: "_xg7c", "_7f3a"; not "_data".
_DYNAMIC_SUFFIX = re.compile(r"^(.+)_(?=[A-Za-z0-9]*[A-Za-z])(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]{4}$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrajectoryCall(_Frozen):
    """One step of a trajectory: the tool's name, its arguments and, optionally, its output."""

    name: str
    args: dict[str, Any] | None = None
    """None when the arguments could not be read; `error` then says why."""
    output: Any = None
    error: str | None = None


class CallMatch(_Frozen):
    """An expected call paired with a called call, and how well they match (0..1)."""

    expected_index: int
    called_index: int
    score: float
    differences: tuple[str, ...] = ()


class TrajectoryScore(_Frozen):
    """The result of `trajectory_correctness`."""

    score: float
    success: bool
    threshold: float
    mode: Literal["assignment", "ordering", "exact"]
    reason: str | None = None
    matches: tuple[CallMatch, ...] = ()
    missing: tuple[int, ...] = ()
    """Indexes of expected calls that were not made."""
    extra: tuple[int, ...] = ()
    """Indexes of called calls that matched nothing expected."""
    out_of_order: tuple[int, ...] = ()
    """Indexes of expected calls that were made, but not in the expected order (ordering and exact modes)."""
    match_score: float | None = None
    """The reference-based score before the judge's selection score was applied."""
    selection_score: float | None = None
    """The judge's tool-selection score in [0, 1], when `available_tools` was given."""
    selection_explanation: str | None = None
    usage: JudgeUsage | None = None


def normalize_tool_name(name: str, *, keep: Collection[str] = ()) -> str:
    """`name` without a dynamic suffix: a trailing underscore plus 4 letters and digits that
    contain both (`delegate_to_sql_query_agent_xg7c` -> `delegate_to_sql_query_agent`).
    `_data`, `_name` and `_2024` stay, and so does every name in `keep` (real tool names:
    `resize_img2` must not become `resize`)."""
    if name in keep:
        return name
    found = _DYNAMIC_SUFFIX.match(name)
    return found.group(1) if found else name


# --- reading trajectories --------------------------------------------------------------------


def read_trajectory(raw: Any) -> list[TrajectoryCall]:
    """Read a trajectory: a list of calls `{name, args | arguments | input_parameters | input,
    output?}` in any shape `normalize_call` reads, bare tool names, `TrajectoryCall`/`ToolCall`
    objects, `{"tool_calls": [...]}`, or an OpenAI/Anthropic message list (see
    `trajectory_from_messages`). A JSON string is parsed first. Raises ValueError when the
    value is none of these.
    """
    if raw is None:
        return []
    if isinstance(raw, History):
        return trajectory_from_messages(raw)
    if isinstance(raw, str):
        try:
            raw = parse_json(raw)
        except ValueError as exc:
            raise ValueError(f"trajectory is not valid JSON: {exc}") from None
    raw = unwrap_tool_calls(raw)
    if isinstance(raw, (TrajectoryCall, ToolCall, dict)):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"a trajectory must be a list of calls or messages, got {type(raw).__name__}")
    if holds_messages(raw):
        return trajectory_from_messages(raw)
    return [_read_step(item) for item in raw]


def _read_step(item: Any) -> TrajectoryCall:
    if isinstance(item, TrajectoryCall):
        return item
    if isinstance(item, str) and item.strip():
        return TrajectoryCall(name=item, args={})  # a bare tool name, as in name-only datasets
    call = normalize_call(item)
    output = item.get("output") if isinstance(item, dict) else None
    return TrajectoryCall(name=call.name, args=call.arguments, output=output, error=call.error)


def trajectory_from_messages(messages: Any) -> list[TrajectoryCall]:
    """The calls in an agent's conversation, in order: each assistant tool call, joined with
    the tool result that carries its `tool_call_id` (OpenAI) or `tool_use_id` (Anthropic)
    as its output. A call without a result has output None."""
    history = normalize_history(messages)
    outputs: dict[str, str] = {}
    for message in history.messages:
        if message.role == "tool" and message.tool_call_id and message.tool_call_id not in outputs:
            outputs[message.tool_call_id] = message.content
    steps: list[TrajectoryCall] = []
    for message in history.messages:
        if message.role != "assistant":
            continue
        for call in message.tool_calls:
            output = outputs.get(call.id) if call.id else None
            steps.append(TrajectoryCall(name=call.name, args=call.arguments, output=output, error=call.error))
    return steps


# --- scoring ---------------------------------------------------------------------------------


def trajectory_correctness(
    tools_called: Any,
    expected_tools: Any,
    *,
    evaluation_params: Collection[EvaluationParam] = (),
    should_consider_ordering: bool = False,
    should_exact_match: bool = False,
    strict_mode: bool = False,
    threshold: float = 0.5,
    include_reason: bool = True,
    normalize_names: bool = True,
    tools: Any = None,
) -> TrajectoryScore:
    """Score the calls an agent made against the calls it was expected to make, in [0, 1].

    Both sides take any form `read_trajectory` reads. Names are always compared;
    `evaluation_params` adds `"input_parameters"` (partial credit: the fraction of keys that
    match, recursing into objects; exact equality in exact mode) and/or `"output"` (equal or
    not). `strict_mode` makes the score binary with a threshold of 1. When nothing is
    expected, the score is 1 if nothing was called, else 0. Extra calls lower the score only
    in exact mode; the reason always names them. With `tools` (any format `normalize_tools`
    reads), an argument that is not set counts as its schema default, on both sides.
    """
    scored = _score(
        tools_called,
        expected_tools,
        evaluation_params,
        should_consider_ordering,
        should_exact_match,
        threshold,
        normalize_names,
        tools,
    )
    return _finish(scored, strict_mode=strict_mode, include_reason=include_reason)


async def atrajectory_correctness(
    tools_called: Any,
    expected_tools: Any,
    *,
    judge: Judge | None = None,
    available_tools: Any = None,
    query: Any = "",
    prompts_dir: Path | None = None,
    evaluation_params: Collection[EvaluationParam] = (),
    should_consider_ordering: bool = False,
    should_exact_match: bool = False,
    strict_mode: bool = False,
    threshold: float = 0.5,
    include_reason: bool = True,
    normalize_names: bool = True,
    tools: Any = None,
) -> TrajectoryScore:
    """`trajectory_correctness`, plus an LLM-judged selection score when `available_tools` is
    given: the judge sees the user's request (`query`, a string or a conversation), the
    available tools and the calls made, and scores the choice of tools 1-5, normalised to
    [0, 1] as (score - 1) / 4. The final score is the minimum of the two (then `strict_mode`
    applies). Raises `reflection.judge.JudgeError` when the judge cannot answer.
    """
    scored = _score(
        tools_called,
        expected_tools,
        evaluation_params,
        should_consider_ordering,
        should_exact_match,
        threshold,
        normalize_names,
        tools,
        available_tools,
    )
    if available_tools is None:
        return _finish(scored, strict_mode=strict_mode, include_reason=include_reason)
    if judge is None:
        raise ValueError("available_tools needs a judge to score tool selection")
    judged = await tool_selection_score(
        judge, query=query, available_tools=available_tools, tools_called=tools_called, prompts_dir=prompts_dir
    )
    return _finish(scored, strict_mode=strict_mode, include_reason=include_reason, selection=judged)


async def tool_selection_score(
    judge: Judge,
    *,
    query: Any,
    available_tools: Any,
    tools_called: Any,
    prompts_dir: Path | None = None,
) -> JudgedScore:
    """The judge's score in [0, 1] for how well the called tools were chosen from `available_tools`.

    The reference answer is not shown to the judge: this is an independent second opinion.
    """
    inventory = normalize_tools(available_tools)
    request: Any = (
        query
        if isinstance(query, str)
        else [{"role": m.role, "content": m.content} for m in normalize_history(query).messages]
    )
    data = {
        "user_request": request,
        "available_tools": [
            {"name": t.name, "description": t.description, "parameters": t.parameters} for t in inventory.tools
        ],
        "tool_calls_made": [{"name": s.name, "arguments": s.args} for s in read_trajectory(tools_called)],
    }
    return await ask_score(judge, "scoring/tool_selection", data, prompts_dir=prompts_dir)


class _Scored:
    """A reference-based score before strictness, judge and reason are applied."""

    def __init__(self, result: TrajectoryScore, expected: list[TrajectoryCall], called: list[TrajectoryCall], rename):
        self.result, self.expected, self.called, self.rename = result, expected, called, rename


def _score(
    tools_called,
    expected_tools,
    evaluation_params,
    ordering,
    exact,
    threshold,
    normalize_names,
    tools,
    available_tools=None,
) -> _Scored:
    params = _check_params(evaluation_params)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    expected = read_trajectory(expected_tools)
    called = read_trajectory(tools_called)
    for index, step in enumerate(expected):
        if step.error is not None:
            raise ValueError(f"expected call #{index} is not readable: {step.error}")
    rename: Callable[[str], str]
    if normalize_names:
        # A declared tool or an expected name is a real name, never a suffixed one: keeping them
        # whole means stripping cannot merge two tools (resize_img2 / resize_img3 -> resize) or
        # two expected names.
        keep = {step.name for step in expected}
        for declared in (tools, available_tools):
            if declared is not None:
                keep.update(spec.name for spec in normalize_tools(declared).tools)
        rename = functools.partial(normalize_tool_name, keep=frozenset(keep))
    else:
        rename = _same_name
    if tools is not None:
        inventory = normalize_tools(tools)
        expected = [_with_defaults(step, inventory, rename) for step in expected]
        called = [_with_defaults(step, inventory, rename) for step in called]
    mode: Literal["assignment", "ordering", "exact"]
    if exact:
        mode, outcome = "exact", _exact(expected, called, params, rename)
    elif ordering:
        mode, outcome = "ordering", _ordered(expected, called, params, rename)
    else:
        mode, outcome = "assignment", _assigned(expected, called, params, rename)
    raw, matches, missing, extra, out_of_order = outcome
    score = min(1.0, max(0.0, raw))
    result = TrajectoryScore(
        score=score,
        success=score >= threshold,
        threshold=threshold,
        mode=mode,
        matches=tuple(matches),
        missing=tuple(missing),
        extra=tuple(extra),
        out_of_order=tuple(out_of_order),
        match_score=score,
    )
    return _Scored(result, expected, called, rename)


def _same_name(name: str) -> str:
    return name


def _with_defaults(step: TrajectoryCall, inventory: ToolInventory, rename) -> TrajectoryCall:
    spec = inventory.get(step.name) or inventory.get(rename(step.name))
    if spec is None or step.args is None:
        return step
    return step.model_copy(update={"args": with_defaults(step.args, spec.parameters)})


def _finish(
    scored: _Scored, *, strict_mode: bool, include_reason: bool, selection: JudgedScore | None = None
) -> TrajectoryScore:
    result = scored.result
    score, threshold = result.score, result.threshold
    update: dict[str, Any] = {}
    if selection is not None:
        score = min(score, selection.score)
        update.update(
            selection_score=selection.score, selection_explanation=selection.explanation, usage=selection.usage
        )
    if strict_mode:
        threshold = 1.0
        score = 1.0 if score >= 1.0 else 0.0
    update.update(score=score, success=score >= threshold, threshold=threshold)
    result = result.model_copy(update=update)
    if include_reason:
        result = result.model_copy(update={"reason": _reason(result, scored.expected, scored.called, scored.rename)})
    return result


def _check_params(evaluation_params: Collection[str]) -> frozenset[str]:
    if isinstance(evaluation_params, str):
        evaluation_params = (evaluation_params,)
    unknown = set(evaluation_params) - set(_EVALUATION_PARAMS) - {"tool"}
    if unknown:
        raise ValueError(f"unknown evaluation_params {sorted(unknown)}; choose from {list(_EVALUATION_PARAMS)}")
    return frozenset(evaluation_params) - {"tool"}


def _output(value: Any) -> Any:
    # Tool messages carry text; '{"rows": 3}' and {"rows": 3} are the same output.
    if isinstance(value, str):
        try:
            return parse_json(value)
        except ValueError:
            return value
    return value


def _pair(expected: TrajectoryCall, called: TrajectoryCall, params: frozenset[str], rename, exact: bool) -> float:
    if rename(expected.name) != rename(called.name):
        return 0.0
    score = 1.0
    if "input_parameters" in params:
        if called.args is None or expected.args is None:
            return 0.0
        if exact:
            score = 1.0 if json_equal(expected.args, called.args) else 0.0
        else:
            score = argument_similarity(expected.args, called.args)
    if "output" in params and not json_equal(_output(expected.output), _output(called.output)):
        return 0.0
    return score


def _match(
    expected: list[TrajectoryCall], called: list[TrajectoryCall], e: int, c: int, score: float, params: frozenset[str]
) -> CallMatch:
    differences: list[str] = []
    exp, got = expected[e], called[c]
    if "input_parameters" in params:
        if got.args is None:
            differences.append(f"arguments unreadable: {got.error}")
        elif exp.args is not None:
            differences.extend(argument_differences(exp.args, got.args))
    if "output" in params and not json_equal(_output(exp.output), _output(got.output)):
        differences.append("output differs")
    return CallMatch(expected_index=e, called_index=c, score=score, differences=tuple(differences))


Outcome = tuple[float, list[CallMatch], list[int], list[int], list[int]]


def _empty_expected(called: list[TrajectoryCall]) -> Outcome:
    return (0.0 if called else 1.0), [], [], list(range(len(called))), []


def _assigned(expected, called, params, rename) -> Outcome:
    if not expected:
        return _empty_expected(called)
    weights = [[_pair(e, c, params, rename, exact=False) for c in called] for e in expected]
    pairs = [(e, c) for e, c in max_weight_assignment(weights) if weights[e][c] > 0] if called else []
    # Same-name calls left over had nothing in common but the name: report them as a pair with
    # score 0 and their differences, not as one missing and one extra call.
    used_e = {e for e, _ in pairs}
    used_c = {c for _, c in pairs}
    spare = _by_name(called, used_c, rename)
    for e, step in enumerate(expected):
        pool = spare.get(rename(step.name))
        if e not in used_e and pool:
            pairs.append((e, pool.pop(0)))
    pairs.sort()
    matches = [_match(expected, called, e, c, weights[e][c], params) for e, c in pairs]
    used_e = {e for e, _ in pairs}
    used_c = {c for _, c in pairs}
    # fsum rounds exactly once, so the score does not depend on the order of the calls.
    score = math.fsum(m.score for m in matches) / len(expected)
    missing = [i for i in range(len(expected)) if i not in used_e]
    extra = [j for j in range(len(called)) if j not in used_c]
    return score, matches, missing, extra, []


def _by_name(called, used: set[int], rename) -> dict[str, list[int]]:
    spare: dict[str, list[int]] = {}
    for j, step in enumerate(called):
        if j not in used:
            spare.setdefault(rename(step.name), []).append(j)
    return spare


def _ordered(expected, called, params, rename) -> Outcome:
    if not expected:
        return _empty_expected(called)
    m, n = len(expected), len(called)
    weights = [[_pair(e, c, params, rename, exact=False) for c in called] for e in expected]
    same = [[rename(e.name) == rename(c.name) for c in called] for e in expected]
    # Maximise (summed credit, number of same-name pairs) lexicographically: the credit is the
    # score; the count keeps same-name pairs with no credit in the sequence, for the reason.
    dp = [[(0.0, 0)] * (n + 1) for _ in range(m + 1)]
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            best = max(dp[i - 1][j], dp[i][j - 1])
            if same[i - 1][j - 1]:
                w, k = dp[i - 1][j - 1]
                best = max(best, (w + weights[i - 1][j - 1], k + 1))
            dp[i][j] = best
    pairs: list[tuple[int, int]] = []
    i, j = m, n
    while i > 0 and j > 0:
        w, k = dp[i - 1][j - 1]
        if same[i - 1][j - 1] and dp[i][j] == (w + weights[i - 1][j - 1], k + 1):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif dp[i][j] == dp[i - 1][j]:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    matches = [_match(expected, called, e, c, weights[e][c], params) for e, c in pairs]
    score = math.fsum(x.score for x in matches) / m
    missing, extra, out_of_order = _leftovers(expected, called, pairs, rename)
    return score, matches, missing, extra, out_of_order


def _exact(expected, called, params, rename) -> Outcome:
    if not expected:
        return _empty_expected(called)
    same = len(expected) == len(called) and all(
        _pair(e, c, params, rename, exact=True) == 1.0 for e, c in zip(expected, called, strict=True)
    )
    if same:
        return 1.0, [_match(expected, called, i, i, 1.0, params) for i in range(len(expected))], [], [], []
    # Not exact: report the longest in-order agreement, so the reason can name what differs.
    _, matches, missing, extra, out_of_order = _ordered(expected, called, params, rename)
    return 0.0, matches, missing, extra, out_of_order


def _leftovers(expected, called, pairs, rename) -> tuple[list[int], list[int], list[int]]:
    """Unpaired expected calls whose tool was called elsewhere are out of order; the rest are missing."""
    used_e = {e for e, _ in pairs}
    used_c = {c for _, c in pairs}
    spare = _by_name(called, used_c, rename)
    missing: list[int] = []
    out_of_order: list[int] = []
    for i, step in enumerate(expected):
        if i in used_e:
            continue
        pool = spare.get(rename(step.name))
        if pool:
            used_c.add(pool.pop(0))
            out_of_order.append(i)
        else:
            missing.append(i)
    extra = [j for j in range(len(called)) if j not in used_c]
    return missing, extra, out_of_order


def _describe(step: TrajectoryCall, index: int) -> str:
    args = "" if step.args is None else shorten(dumps(step.args), 80)
    return f"#{index} {step.name}({args})"


def _reason(result: TrajectoryScore, expected, called, rename) -> str:
    names_expected = [s.name for s in expected]
    names_called = [s.name for s in called]
    head = f"Score {result.score:.2f} ({result.mode} mode); expected {names_expected}, called {names_called}."
    parts: list[str] = []
    if result.missing:
        parts.append("missing: " + ", ".join(_describe(expected[i], i) for i in result.missing))
    if result.out_of_order:
        parts.append("out of order: " + ", ".join(_describe(expected[i], i) for i in result.out_of_order))
    if result.extra:
        parts.append("extra: " + ", ".join(_describe(called[j], j) for j in result.extra))
    for match in result.matches:
        if match.differences:
            parts.append(
                f"argument differences in expected #{match.expected_index} {expected[match.expected_index].name} "
                f"vs called #{match.called_index}: " + "; ".join(match.differences)
            )
    if result.mode == "exact" and result.score < 1.0 and not parts:
        parts.append("the calls differ from the expected sequence")
    renamed = sorted({s.name for s in (*expected, *called) if rename(s.name) != s.name})
    if renamed:
        parts.append("names compared without dynamic suffixes: " + ", ".join(renamed))
    if result.selection_score is not None:
        parts.append(
            f"reference match {result.match_score:.2f}, tool selection (judge) {result.selection_score:.2f}: "
            f"{result.selection_explanation}"
        )
    if not parts:
        return head + " Every expected call was matched."
    return head + " " + "; ".join(parts) + "."
