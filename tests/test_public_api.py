"""The public API, pinned: the names `reflection` exports and those of its four public
subpackages (`reflection.batch`, `reflection.scoring`, `reflection.testing`,
`reflection.integrations`).

A name added, renamed or removed fails here until the list below is changed with it, so a change
to the public surface is always deliberate (and belongs in the release notes).
"""

from __future__ import annotations

import importlib

import pytest

import reflection

ROOT = [
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
    "SEMANTIC_CHECKS",
    "STATIC_CHECKS",
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

SUBPACKAGES = {
    "reflection.batch": [
        "BatchHtmlReport",
        "BatchReport",
        "BatchStats",
        "DEFAULT_CACHE_NAME",
        "OutputCorrupt",
        "OutputLocked",
        "SQLiteJudgeCache",
        "ScoreHtmlReport",
        "SourceRow",
        "batch_report_html",
        "build_report",
        "default_cache_path",
        "read_report",
        "read_source",
        "reflect_dataset",
        "render_report",
        "run_batch",
    ],
    "reflection.scoring": [
        "CallMatch",
        "DatasetReport",
        "JUDGED_KEYS",
        "JudgedScore",
        "SCORE_KEYS",
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
    ],
    "reflection.testing": [
        "FakeJudge",
        "REPLY_STYLES",
        "RecordedRequest",
        "TRUNCATED_BUDGET",
        "assert_valid_call",
        "check_reply",
    ],
    "reflection.integrations": ["EscalationRequired", "approval_text"],
}

LAZY = ("reflection", "reflection.batch", "reflection.scoring")
"""The packages whose names load on first use, from their `_HOMES` table."""


def test_the_names_reflection_exports_are_the_pinned_ones():
    assert sorted(reflection.__all__) == sorted(ROOT)
    assert len(set(reflection.__all__)) == len(reflection.__all__)


@pytest.mark.parametrize("name", sorted(SUBPACKAGES))
def test_each_public_subpackage_exports_the_pinned_names(name):
    package = importlib.import_module(name)
    assert sorted(package.__all__) == sorted(SUBPACKAGES[name])
    assert len(set(package.__all__)) == len(package.__all__)


@pytest.mark.parametrize("name", LAZY)
def test_a_lazy_package_loads_exactly_the_names_it_exports(name):
    package = importlib.import_module(name)
    assert sorted(package._HOMES) == sorted(package.__all__)


@pytest.mark.parametrize("name", ["reflection", *sorted(SUBPACKAGES)])
def test_every_exported_name_resolves(name):
    package = importlib.import_module(name)
    for exported in package.__all__:
        assert getattr(package, exported) is not None, (name, exported)


def test_the_docstrings_name_the_public_subpackages():
    for name in ["reflection", *SUBPACKAGES]:
        doc = importlib.import_module(name).__doc__ or ""
        for subpackage in SUBPACKAGES:
            assert f"`{subpackage}`" in doc, (name, subpackage)
