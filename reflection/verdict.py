"""Thresholds and the reduction of every stage to one `overall_valid` verdict."""

from __future__ import annotations

from collections.abc import Mapping

from reflection.errors import JudgeError
from reflection.model import CheckReply, SemanticCheckResult, SemanticStatus, StaticResult

__all__ = ["judge_check", "overall_valid"]


def judge_check(reply: CheckReply | JudgeError, threshold: int, uncertain_below: float | None) -> SemanticCheckResult:
    """One check's result: passed when its score reaches `threshold`; `uncertain` when the
    judge's confidence is below `uncertain_below`; `error` when the judge failed. What was
    coerced or dropped to read the judge's answer is kept in `notes`."""
    if isinstance(reply, JudgeError):
        return SemanticCheckResult(status="error", error=reply.reason)
    # A check without a confidence is never marked uncertain: the judge did not say it was unsure.
    status: SemanticStatus
    if uncertain_below is not None and reply.confidence is not None and reply.confidence < uncertain_below:
        status = "uncertain"
    else:
        status = "passed" if reply.score >= threshold else "failed"
    return SemanticCheckResult(
        status=status,
        score=reply.score,
        confidence=reply.confidence,
        evidence=reply.evidence,
        explanation=reply.explanation,
        correction=reply.correction,
        notes=reply.notes,
    )


def overall_valid(static: StaticResult, semantic: Mapping[str, SemanticCheckResult]) -> bool | None:
    """Static valid AND every semantic check passed.

    A definite failure anywhere gives False (the judge can never override a static failure);
    otherwise a check in `error` or `uncertain` makes the verdict unknown (None), never False.
    """
    if not static.valid:
        return False
    statuses = [check.status for check in semantic.values()]
    if "failed" in statuses:
        return False
    if "error" in statuses or "uncertain" in statuses:
        return None
    return True
