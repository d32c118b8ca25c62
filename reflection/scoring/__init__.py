"""Reference-based scoring: predicted tool calls and answers against expected ones.

Call level (`tool_call_equivalence`, `binary_tool_call`, `staged_tool_call`), dataset level
(`ToolCallingEvaluator`), trajectories (`trajectory_correctness`) and final answers
(`exact_match`, `rouge_l`, `response_correctness`), and whole files (`score_files`, or
`ascore_files` with a judge). Inputs are read by `reflection.formats`, and the LLM-judged
scores go through `reflection.judge`.

One of the four public subpackages (`reflection.batch`, `reflection.scoring`, `reflection.testing`
and `reflection.integrations`, see `reflection`): its public API is `__all__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reflection._lazy import lazy_attributes

if TYPE_CHECKING:
    from reflection.scoring._judged import JudgedScore
    from reflection.scoring.calls import (
        binary_tool_call,
        staged_tool_call,
        tool_call_equivalence,
    )
    from reflection.scoring.dataset import (
        DatasetReport,
        SampleRecord,
        ScoreWeights,
        ScoringSample,
        ToolCallingEvaluator,
        evaluate_tool_calls,
        interpret_score,
    )
    from reflection.scoring.files import (
        JUDGED_KEYS,
        SCORE_KEYS,
        ScoreSummary,
        ascore_files,
        score_files,
    )
    from reflection.scoring.response import exact_match, find_wordnet, meteor, response_correctness, rouge_l
    from reflection.scoring.trajectory import (
        CallMatch,
        TrajectoryCall,
        TrajectoryScore,
        atrajectory_correctness,
        normalize_tool_name,
        read_trajectory,
        tool_selection_score,
        trajectory_correctness,
        trajectory_from_messages,
    )

# Where each name lives; it is imported from there on first use (PEP 562).
_HOMES = {
    "JudgedScore": "reflection.scoring._judged",
    "binary_tool_call": "reflection.scoring.calls",
    "staged_tool_call": "reflection.scoring.calls",
    "tool_call_equivalence": "reflection.scoring.calls",
    "DatasetReport": "reflection.scoring.dataset",
    "SampleRecord": "reflection.scoring.dataset",
    "ScoreWeights": "reflection.scoring.dataset",
    "ScoringSample": "reflection.scoring.dataset",
    "ToolCallingEvaluator": "reflection.scoring.dataset",
    "evaluate_tool_calls": "reflection.scoring.dataset",
    "interpret_score": "reflection.scoring.dataset",
    "JUDGED_KEYS": "reflection.scoring.files",
    "SCORE_KEYS": "reflection.scoring.files",
    "ScoreSummary": "reflection.scoring.files",
    "ascore_files": "reflection.scoring.files",
    "score_files": "reflection.scoring.files",
    "exact_match": "reflection.scoring.response",
    "find_wordnet": "reflection.scoring.response",
    "meteor": "reflection.scoring.response",
    "response_correctness": "reflection.scoring.response",
    "rouge_l": "reflection.scoring.response",
    "CallMatch": "reflection.scoring.trajectory",
    "TrajectoryCall": "reflection.scoring.trajectory",
    "TrajectoryScore": "reflection.scoring.trajectory",
    "atrajectory_correctness": "reflection.scoring.trajectory",
    "normalize_tool_name": "reflection.scoring.trajectory",
    "read_trajectory": "reflection.scoring.trajectory",
    "tool_selection_score": "reflection.scoring.trajectory",
    "trajectory_correctness": "reflection.scoring.trajectory",
    "trajectory_from_messages": "reflection.scoring.trajectory",
}

__all__ = [
    "JUDGED_KEYS",
    "SCORE_KEYS",
    "CallMatch",
    "DatasetReport",
    "JudgedScore",
    "SampleRecord",
    "ScoreSummary",
    "ScoreWeights",
    "ScoringSample",
    "ToolCallingEvaluator",
    "TrajectoryCall",
    "TrajectoryScore",
    "ascore_files",
    "atrajectory_correctness",
    "binary_tool_call",
    "evaluate_tool_calls",
    "exact_match",
    "find_wordnet",
    "interpret_score",
    "meteor",
    "normalize_tool_name",
    "read_trajectory",
    "response_correctness",
    "rouge_l",
    "score_files",
    "staged_tool_call",
    "tool_call_equivalence",
    "tool_selection_score",
    "trajectory_correctness",
    "trajectory_from_messages",
]

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, __all__)
