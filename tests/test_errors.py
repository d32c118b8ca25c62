"""One exception tree: every public error is a `ReflectionError`, keeps its historic built-in
base, and is the same class from `reflection.errors`, from its old home and from `reflection`."""

import importlib
import subprocess
import sys

import pytest

import reflection
from reflection import errors

# name -> (historic base, the modules it was always importable from)
ERRORS = {
    "ConfigError": (ValueError, ["reflection.config"]),
    "JudgeError": (Exception, ["reflection.judge"]),
    "JudgeFatalError": (Exception, ["reflection.judge"]),
    "InvalidReply": (Exception, ["reflection.judge"]),
    "UnreadableReply": (ValueError, ["reflection.judge.reply"]),
    "JSONTooDeep": (ValueError, ["reflection._json"]),
    "RowError": (ValueError, ["reflection.rows"]),
    "LabelError": (ValueError, ["reflection.calibrate"]),
    "NotAResultRow": (ValueError, ["reflection.batch.report"]),
    "OutputCorrupt": (ValueError, ["reflection.batch._output"]),
    "OutputLocked": (RuntimeError, ["reflection.batch._output"]),
    "RowProblem": (ValueError, ["reflection.scoring.files"]),
    "StreamTooLarge": (ValueError, ["reflection.service._sse"]),
    "UnreadableMessage": (Exception, ["reflection.service.mcp_proxy"]),
    "Refused": (Exception, ["reflection.service._dialects"]),
}

EXPORTED = [
    "ReflectionError",
    "ConfigError",
    "JudgeError",
    "JudgeFatalError",
    "LabelError",
    "NotAResultRow",
    "OutputCorrupt",
    "OutputLocked",
    "RowError",
    "RowProblem",
]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_each_error_is_a_reflection_error_with_its_historic_base(name):
    cls = getattr(errors, name)
    base, _ = ERRORS[name]
    assert issubclass(cls, errors.ReflectionError)
    assert issubclass(cls, base)
    assert cls.__module__ == "reflection.errors"


@pytest.mark.parametrize(
    ("name", "home"), [(name, home) for name, (_, homes) in sorted(ERRORS.items()) for home in homes]
)
def test_the_old_import_paths_give_the_same_class(name, home):
    try:
        module = importlib.import_module(home)
    except ImportError as exc:  # an optional extra that is not installed
        pytest.skip(str(exc))
    assert getattr(module, name) is getattr(errors, name)


@pytest.mark.parametrize("name", EXPORTED)
def test_the_errors_users_catch_are_exported_from_reflection(name):
    assert name in reflection.__all__
    assert getattr(reflection, name) is getattr(errors, name)
    assert issubclass(getattr(reflection, name), reflection.ReflectionError)


def test_the_judges_request_errors_are_reflection_errors_too():
    for name in ("JudgeRequestError", "JudgeTimeout", "JudgeConnectionError", "JudgeStatusError"):
        cls = getattr(errors, name)
        assert issubclass(cls, errors.ReflectionError)
        assert getattr(importlib.import_module("reflection.judge"), name) is cls
    assert errors.JudgeStatusError(429, {}, "").retryable
    assert errors.JudgeStatusError(503, {}, "").retryable
    assert not errors.JudgeStatusError(400, {}, "").retryable
    assert str(errors.JudgeStatusError(500, {"message": "down"}, "down")) == "HTTP 500 from the judge endpoint: down"


def test_a_judge_error_and_a_fatal_one_stay_apart():
    assert not issubclass(errors.JudgeFatalError, errors.JudgeError)
    assert not issubclass(errors.JudgeError, errors.JudgeFatalError)
    assert errors.JudgeError("no answer").usage is None  # the judge always gives its usage


def test_escalation_lives_with_the_hooks_that_word_it_and_is_a_reflection_error():
    # Its message is the approval text the integrations write from a gate's Decision: a class
    # of the base layer could not make it without importing the gate.
    from reflection.integrations import EscalationRequired

    assert issubclass(EscalationRequired, errors.ReflectionError)
    assert EscalationRequired.__module__ == "reflection.integrations._common"


def test_old_except_clauses_still_catch():
    with pytest.raises(ValueError, match="bad"):
        raise errors.ConfigError("bad")
    with pytest.raises(RuntimeError):
        raise errors.OutputLocked("busy")
    with pytest.raises(reflection.ReflectionError):
        raise errors.RowError("unreadable row")


def test_the_errors_module_is_the_base_layer():
    # Importing it loads nothing else of reflection's (the package's own __init__ and what it
    # imports at once, `_lazy` and `_version`, aside).
    code = (
        "import sys, reflection.errors\n"
        "print(sorted(m for m in sys.modules if m.startswith('reflection.') and m not in "
        "('reflection._lazy', 'reflection._version')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['reflection.errors']"
