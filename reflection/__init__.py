"""reflection: check an LLM agent's tool calls before they execute."""

from reflection.batch import reflect_dataset
from reflection.config import ReflectionConfig
from reflection.formats import normalize_call, normalize_calls, normalize_history, normalize_tools
from reflection.model import (
    SEMANTIC_CHECKS,
    STATIC_CHECKS,
    CheckResult,
    Finding,
    History,
    Message,
    ReflectionResult,
    SemanticCheckResult,
    StaticResult,
    ToolCall,
    ToolInventory,
    ToolSpec,
)

from reflection.judge import Judge, JudgeConfig, JudgeError, JudgeFatalError, Price
from reflection.pipeline import Reflector, reflect, reflect_sync
from reflection.gate import Decision, Gate, GatePolicy, ToolRule
from reflection.scoring import (
    ScoreWeights,
    ToolCallingEvaluator,
    atrajectory_correctness,
    binary_tool_call,
    evaluate_tool_calls,
    exact_match,
    response_correctness,
    rouge_l,
    staged_tool_call,
    tool_call_equivalence,
    trajectory_correctness,
)
from reflection.static import check_call, check_calls

__version__ = "0.1.0"

__all__ = [
    "SEMANTIC_CHECKS",
    "STATIC_CHECKS",
    "CheckResult",
    "Decision",
    "Finding",
    "Gate",
    "GatePolicy",
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "JudgeFatalError",
    "Price",
    "ReflectionConfig",
    "Reflector",
    "History",
    "Message",
    "ReflectionResult",
    "SemanticCheckResult",
    "ScoreWeights",
    "StaticResult",
    "ToolCall",
    "ToolCallingEvaluator",
    "ToolInventory",
    "ToolRule",
    "ToolSpec",
    "atrajectory_correctness",
    "binary_tool_call",
    "check_call",
    "check_calls",
    "evaluate_tool_calls",
    "exact_match",
    "normalize_call",
    "normalize_calls",
    "normalize_history",
    "normalize_tools",
    "reflect",
    "reflect_dataset",
    "reflect_sync",
    "response_correctness",
    "rouge_l",
    "staged_tool_call",
    "tool_call_equivalence",
    "trajectory_correctness",
]
