"""The static stage alone as reflection results: the checks against the specs, no grounding, no
judge (`POST /v1/check`).

(Layer: beside `pipeline`, whose `Reflector` runs the whole reflection; it may move into
`pipeline` as one more entry point.)
"""

from __future__ import annotations

from typing import Any

from reflection.formats import is_parallel
from reflection.model import ReflectionResult
from reflection.static import check_call, check_calls

__all__ = ["STATIC_ONLY", "check_static"]

STATIC_ONLY = "static stage only"
"""Why the judge was not asked, when the caller gives no other reason."""


def check_static(call: Any, tools: Any, *, judge_skipped: str = STATIC_ONLY) -> ReflectionResult | list[ReflectionResult]:
    """The static stage's verdict on a proposed call as a `ReflectionResult` (one call: one
    result; several, as `Reflector.reflect` reads them: one per call, in order), with no grounding
    and no judge: `judge_skipped` says so, `overall_valid` is the static verdict. Raises
    `TypeError` / `ValueError` for data the normalisers refuse, as `Reflector.reflect` does."""
    parallel = is_parallel(call)
    statics = check_calls(call, tools) if parallel else [check_call(call, tools)]
    results = [ReflectionResult(call=s.call, static=s, warnings=s.warnings, judge_skipped=judge_skipped,
                                overall_valid=s.valid) for s in statics]
    return results if parallel else results[0]
