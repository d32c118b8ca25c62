"""`assert_valid_call`: one line in a user's own test suite that fails with the reasons."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reflection._json import dumps
from reflection._text import terminal_safe
from reflection.model import STATIC_CHECKS

if TYPE_CHECKING:
    from reflection.config import ReflectionConfig
    from reflection.model import ReflectionResult, SemanticCheckResult

__all__ = ["assert_valid_call"]

_SHOWN = 300
"""Characters of one argument list, explanation or quote shown in a failure message."""


def assert_valid_call(
    call: Any, tools: Any, history: Any = None, *, config: ReflectionConfig | None = None, allow_unknown: bool = False
) -> ReflectionResult | list[ReflectionResult]:
    """Reflect `call` and assert that it is valid; return the result (a list for several calls).

    Takes what `reflection.reflect` takes. With no judge in `config` (the default reads
    `REFLECTION_*` from the environment) only the static checks and grounding decide; give
    `ReflectionConfig(judge=fake_judge.config)` for the offline judge of `reflection.testing`.
    A call fails when any check fails; an unknown verdict (a judge check in `error`, or
    `uncertain`) fails too unless `allow_unknown`. The `AssertionError` lists each failing
    check with its findings, the judge's score, explanation and evidence, and the corrections.
    Blocking; safe inside a running event loop (an `async def` test) as `reflect_sync` is.
    """
    from reflection.pipeline import reflect_sync

    outcome = reflect_sync(call, tools, history, config=config)
    results = outcome if isinstance(outcome, list) else [outcome]
    failing = [r for r in results if r.overall_valid is False or (r.overall_valid is None and not allow_unknown)]
    if failing:
        raise AssertionError("\n".join(line for result in failing for line in describe_failure(result)))
    return outcome


def describe_failure(result: ReflectionResult) -> list[str]:
    """The lines of an `assert_valid_call` failure for one result."""
    given = result.call
    arguments = dumps(given.arguments) if given.arguments is not None else given.raw_arguments or ""
    call = f"{terminal_safe(given.name, one_line=True) or '(no name)'}({_short(arguments)})"
    verdict = "is not valid" if result.overall_valid is False else "has no verdict (unknown)"
    lines = [f"tool call {call} {verdict}:"]
    for name in STATIC_CHECKS:
        check = result.static.checks[name]
        if check.passed:
            continue
        lines.append(f"  static {name} failed")
        lines.extend(f"    {terminal_safe(f.path, one_line=True)}: {_short(f.message)}" for f in check.findings)
    if given.error:
        lines.append(f"  unusable call: {_short(given.error)}")
    for name, semantic in result.semantic.items():
        if semantic.status not in ("passed", "skipped"):
            lines.extend(_semantic_lines(name, semantic))
    ungrounded = [
        f"{terminal_safe(g.path, one_line=True)} = {_short(dumps(g.value))}" for g in result.grounding if not g.grounded
    ]
    if ungrounded:
        lines.append(f"  values found nowhere in the conversation or the specs: {'; '.join(ungrounded)}")
    if result.static.correction is not None:
        fixed = result.static.correction
        lines.append(
            f"  corrected call (passes the static checks): {terminal_safe(fixed.name, one_line=True)}"
            f"({_short(dumps(fixed.arguments))})"
        )
    if result.judge_skipped and not result.static.valid:
        lines.append(f"  judge not asked: {terminal_safe(result.judge_skipped, one_line=True)}")
    return lines


def _semantic_lines(name: str, check: SemanticCheckResult) -> list[str]:
    if check.status == "error":
        return [f"  judge {name}: no answer: {_short(check.error or 'judge error')}"]
    how = f"score {check.score}/5" + ("" if check.confidence is None else f", confidence {check.confidence:g}")
    word = "failed" if check.status == "failed" else "uncertain"
    lines = [f"  judge {name} {word} ({how}): {_short(check.explanation) or 'no explanation given'}"]
    lines.extend(f"    evidence: {_short(quote)!r}" for quote in check.evidence)
    correction = check.correction
    if correction is not None:
        if correction.suggested_arguments is not None:
            lines.append(f"    suggested arguments: {_short(dumps(correction.suggested_arguments))}")
        if correction.better_function:
            lines.append(f"    better tool: {terminal_safe(correction.better_function, one_line=True)}")
        if correction.missing_prerequisite:
            lines.append(f"    first: {_short(correction.missing_prerequisite)}")
    return lines


def _short(text: str) -> str:
    """`text` as one terminal-safe line of at most `_SHOWN` characters."""
    return terminal_safe(text, one_line=True, limit=_SHOWN)
