"""reflection: check an LLM agent's tool calls before they execute.

The public API is the names below (`__all__`) and four public subpackages, each with its own
`__all__`: `reflection.batch` (datasets of calls: `reflect_dataset`, `run_batch`, reports),
`reflection.scoring` (predicted calls and answers against references), `reflection.testing`
(an offline judge and `assert_valid_call` for your own tests, with a pytest plugin) and
`reflection.integrations` (framework hooks, one module per framework). `tests/test_public_api.py`
pins these names, so a change to them is deliberate. The `reflection` command lives in
`reflection.cli` and `reflection serve` runs `reflection.service`; a module or name with a
leading underscore is internal.

The public names below load on first use (PEP 562): `import reflection` costs little, and a
static-only program never imports the judge (httpx, tenacity), the batch cache (aiosqlite),
scoring or the gate. Every exception reflection raises on purpose is a `ReflectionError`
(`reflection.errors` draws the tree); the ones users catch are exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reflection._lazy import lazy_attributes
from reflection._version import __version__ as __version__

if TYPE_CHECKING:
    from reflection.batch import reflect_dataset
    from reflection.config import ReflectionConfig, ServiceConfig, UpstreamConfig
    from reflection.errors import (
        ConfigError,
        JudgeError,
        JudgeFatalError,
        LabelError,
        NotAResultRow,
        OutputCorrupt,
        OutputLocked,
        ReflectionError,
        RowError,
        RowProblem,
    )
    from reflection.formats import normalize_call, normalize_calls, normalize_history, normalize_tools
    from reflection.gate import Decision, Gate, GatePolicy, ToolRule
    from reflection.judge import Judge, JudgeConfig, Price
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
    from reflection.pipeline import Reflector, reflect, reflect_sync
    from reflection.scoring import (
        ScoreWeights,
        ToolCallingEvaluator,
        atrajectory_correctness,
        binary_tool_call,
        evaluate_tool_calls,
        exact_match,
        meteor,
        response_correctness,
        rouge_l,
        staged_tool_call,
        tool_call_equivalence,
        trajectory_correctness,
    )
    from reflection.static import check_call, check_calls

# Where each public name lives; `__getattr__` imports it from there on first use.
_HOMES = {
    "reflect_dataset": "reflection.batch.runner",
    "ReflectionConfig": "reflection.config",
    "ServiceConfig": "reflection.config",
    "UpstreamConfig": "reflection.config",
    "normalize_call": "reflection.formats",
    "normalize_calls": "reflection.formats",
    "normalize_history": "reflection.formats",
    "normalize_tools": "reflection.formats",
    "SEMANTIC_CHECKS": "reflection.model",
    "STATIC_CHECKS": "reflection.model",
    "CheckResult": "reflection.model",
    "Finding": "reflection.model",
    "History": "reflection.model",
    "Message": "reflection.model",
    "ReflectionResult": "reflection.model",
    "SemanticCheckResult": "reflection.model",
    "StaticResult": "reflection.model",
    "ToolCall": "reflection.model",
    "ToolInventory": "reflection.model",
    "ToolSpec": "reflection.model",
    "Judge": "reflection.judge.client",
    "JudgeConfig": "reflection.judge.config",
    "Price": "reflection.judge.config",
    "ReflectionError": "reflection.errors",
    "ConfigError": "reflection.errors",
    "JudgeError": "reflection.errors",
    "JudgeFatalError": "reflection.errors",
    "LabelError": "reflection.errors",
    "NotAResultRow": "reflection.errors",
    "OutputCorrupt": "reflection.errors",
    "OutputLocked": "reflection.errors",
    "RowError": "reflection.errors",
    "RowProblem": "reflection.errors",
    "Reflector": "reflection.pipeline",
    "reflect": "reflection.pipeline",
    "reflect_sync": "reflection.pipeline",
    "Decision": "reflection.gate",
    "Gate": "reflection.gate",
    "GatePolicy": "reflection.config",
    "ToolRule": "reflection.config",
    "ScoreWeights": "reflection.scoring",
    "ToolCallingEvaluator": "reflection.scoring",
    "atrajectory_correctness": "reflection.scoring",
    "binary_tool_call": "reflection.scoring",
    "evaluate_tool_calls": "reflection.scoring",
    "exact_match": "reflection.scoring",
    "meteor": "reflection.scoring",
    "response_correctness": "reflection.scoring",
    "rouge_l": "reflection.scoring",
    "staged_tool_call": "reflection.scoring",
    "tool_call_equivalence": "reflection.scoring",
    "trajectory_correctness": "reflection.scoring",
    "check_call": "reflection.static",
    "check_calls": "reflection.static",
}

__all__ = [
    "SEMANTIC_CHECKS",
    "STATIC_CHECKS",
    "CheckResult",
    "ConfigError",
    "Decision",
    "Finding",
    "Gate",
    "GatePolicy",
    "History",
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "JudgeFatalError",
    "LabelError",
    "Message",
    "NotAResultRow",
    "OutputCorrupt",
    "OutputLocked",
    "Price",
    "ReflectionConfig",
    "ReflectionError",
    "ReflectionResult",
    "Reflector",
    "RowError",
    "RowProblem",
    "ScoreWeights",
    "SemanticCheckResult",
    "ServiceConfig",
    "StaticResult",
    "ToolCall",
    "ToolCallingEvaluator",
    "ToolInventory",
    "ToolRule",
    "ToolSpec",
    "UpstreamConfig",
    "atrajectory_correctness",
    "binary_tool_call",
    "check_call",
    "check_calls",
    "evaluate_tool_calls",
    "exact_match",
    "meteor",
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


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, __all__)
