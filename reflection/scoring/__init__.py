"""Reference-based scoring: predicted tool calls and answers against expected ones.

Call level (`tool_call_equivalence`, `binary_tool_call`, `staged_tool_call`), dataset level
(`ToolCallingEvaluator`), trajectories (`trajectory_correctness`) and final answers
(`exact_match`, `rouge_l`, `meteor`, `response_correctness`), and whole files (`score_files`, or
`ascore_files` with a judge). Inputs are read by `reflection.formats`, and the LLM-judged
scores go through `reflection.judge`.
"""

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
