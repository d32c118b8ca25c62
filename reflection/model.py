"""The internal shapes every layer shares: tool specs, calls, messages and results.

Small immutable pydantic models with no behaviour beyond validation and serialisation.
Foreign shapes (OpenAI, Anthropic, MCP, BFCL, ...) are turned into these by `reflection.formats`.
The results' plain data, their flat keys and output rows are `reflection.results`: the checker
makes that data, and the result models here are built from it (`from_data`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, computed_field

from reflection._json import dumps
from reflection._own_words import FEEDBACK_HEADERS
from reflection._text import FEEDBACK_LIMIT, plain_line, quoted, shorten
from reflection._text import plain_line as plain_text
from reflection.results import (  # the check names are the contract's; here for the models' users
    CHECK_PASSED,
    SEMANTIC_CATEGORIES,
    SEMANTIC_CHECKS,
    STATIC_CHECKS,
    GroundingData,
    ResultData,
    StaticData,
    UsageData,
    flat_keys,
    total_usage,
)

__all__ = [
    "PASSED",
    "SEMANTIC_CATEGORIES",
    "SEMANTIC_CHECKS",
    "STATIC_CHECKS",
    "CheckReply",
    "CheckResult",
    "Finding",
    "History",
    "JudgeUsage",
    "Message",
    "ReflectionResult",
    "SemanticCheckResult",
    "SemanticCorrection",
    "SemanticStatus",
    "SpecFormat",
    "SpecProblem",
    "StaticResult",
    "ToolCall",
    "ToolInventory",
    "ToolSpec",
    "ValueGrounding",
    "ValueSource",
    "ValueSourceKind",
    "plain_text",
    "quoted",
    "trusted",
    "trusted_from",
]  # plain_text (`reflection._text.plain_line`) and quoted stay here for the users who import them

SpecFormat = Literal["openai", "function", "anthropic", "mcp", "parameter_list", "native"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_M = TypeVar("_M", bound=BaseModel)
_UNSET_FIELDS: dict[type[Any], tuple[dict[str, Any], tuple[tuple[str, Any], ...]]] = {}
_new = object.__new__
_set_attribute = object.__setattr__
# The three per-instance slots every pydantic model has, set through their descriptors
# (as model_construct does, minus the attribute lookups).
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def trusted(cls: type[_M], **values: Any) -> _M:
    """`cls(**values)` without running validation, for the checker's own hot path.

    Only for values that already are exactly what validation would return: builtin `str`
    (not a subclass), tuples where a field is a tuple, model instances, fresh dicts with `str`
    keys, and every required field given. Fields are then stored as given (a field left out
    gets its default, or a fresh value from its default factory); the object is the same as
    `cls(**values)` in every public respect (field values and their order, `model_fields_set`,
    `model_dump`, equality), as pydantic's own `model_construct` makes it, at a fraction of
    the cost of either.
    """
    return trusted_from(cls, values)


def trusted_from(cls: type[_M], values: Mapping[str, Any]) -> _M:
    """`trusted(cls, **values)` for a dict already built (not copied again)."""
    try:
        defaults, factories = _UNSET_FIELDS[cls]
    except KeyError:
        defaults, factories = _defaults(cls)
    model = _new(cls)
    fields = {**defaults, **values}
    for name, factory in factories:
        if name not in values:
            fields[name] = factory()
    _set_attribute(model, "__dict__", fields)
    _set_fields_set(model, set(values))
    _set_extra(model, None)
    _set_private(model, None)
    return model


def _defaults(cls: type[BaseModel]) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    # Every field in declaration order, with its default (required ones are always given), and
    # the fields whose default comes from a factory (called per object, as validation does).
    defaults = {name: None if info.is_required() else info.default for name, info in cls.model_fields.items()}
    factories = tuple(
        (name, info.default_factory) for name, info in cls.model_fields.items() if info.default_factory is not None
    )
    _UNSET_FIELDS[cls] = defaults, factories
    return defaults, factories


class ToolSpec(_Frozen):
    """One tool as the agent saw it, with its parameters as a JSON Schema object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    source_format: SpecFormat = "native"


class SpecProblem(_Frozen):
    """A tool spec that could not be turned into a `ToolSpec`, or whose schema does not compile."""

    index: int
    name: str | None
    message: str


class ToolInventory(_Frozen):
    """The normalised tools of one request, plus the ones that were broken."""

    tools: tuple[ToolSpec, ...] = ()
    problems: tuple[SpecProblem, ...] = ()
    empty: bool = False
    """True when no tool specs were supplied at all (the `empty_api_spec` case)."""

    def get(self, name: str) -> ToolSpec | None:
        """The tool called `name` (the first, if several share it), or None."""
        return self._by_name.get(name)

    @functools.cached_property
    def _by_name(self) -> dict[str, ToolSpec]:
        # Built once per inventory: a list of thousands of tools is looked up on every call.
        index: dict[str, ToolSpec] = {}
        for tool in self.tools:
            index.setdefault(tool.name, tool)
        return index

    def problem_for(self, name: str) -> SpecProblem | None:
        """The problem recorded for a tool called `name`, or None."""
        for problem in self.problems:
            if problem.name == name:
                return problem
        return None


class ToolCall(_Frozen):
    """A proposed call. `arguments` is None when they could not be read; `error` then says why."""

    name: str
    arguments: dict[str, Any] | None = None
    id: str | None = None
    raw_arguments: str | None = None
    """The arguments exactly as given, when they arrived as a JSON string."""
    error: str | None = None
    """Why this is not a usable call (unparseable arguments, not an object, no name...)."""


class Message(_Frozen):
    """One conversation turn in chat form."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    """For a tool message, the tool that produced it, when known."""


class History(_Frozen):
    """A normalised conversation plus any parts that could not be read."""

    messages: tuple[Message, ...] = ()
    problems: tuple[str, ...] = ()


class Finding(_Frozen):
    """One violation: where it is, what was expected, what was found, and what to do."""

    check: str
    path: str
    """JSON path into the call's arguments, e.g. `$.items[0].qty`; `$` is the arguments object."""
    message: str
    expected: Any = None
    actual: Any = None
    keyword: str | None = None
    """The JSON Schema keyword that failed, when one did."""


class CheckResult(_Frozen):
    """Pass or fail for one named check, with its findings."""

    passed: bool
    findings: tuple[Finding, ...] = ()


PASSED = CheckResult(passed=True)
"""The passing check the static results share (they are immutable)."""

_ALL_PASSED: dict[str, CheckResult] = dict.fromkeys(STATIC_CHECKS, PASSED)  # results.ALL_PASSED as models


class StaticResult(_Frozen):
    """The static stage's answer for one call: every check, pass or fail."""

    call: ToolCall
    checks: dict[str, CheckResult]
    warnings: tuple[str, ...] = ()
    correction: ToolCall | None = None
    """A machine-fixed call that has itself passed re-validation, when one exists."""
    correction_notes: tuple[str, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def valid(self) -> bool:
        """True when every static check passed."""
        # Read once per row: a loop, not all(<generator>), and the shared passing check is
        # known by identity (reading a field of a pydantic model costs far more).
        for check in self.checks.values():  # noqa: SIM110 - see above
            if check is not PASSED and not check.passed:
                return False
        return True

    @classmethod
    def from_data(cls, data: StaticData) -> StaticResult:
        """The result of the checker's plain data (`static.check_call_data`), built without
        validation: the data holds only the checker's own values (a validated call, exact
        `str`, tuples, fresh dicts), so the models are those `StaticResult(...)` would build.
        Data from anywhere else is validated instead (`StaticResult.model_validate`)."""
        checks = dict(_ALL_PASSED)
        if data["valid"]:
            return trusted(cls, call=data["call"], checks=checks, warnings=data["warnings"])
        for name, check in data["checks"].items():
            if check is not CHECK_PASSED:
                checks[name] = trusted(
                    CheckResult,
                    passed=check["passed"],
                    findings=tuple(trusted_from(Finding, f) for f in check["findings"]),
                )
        return trusted(
            cls,
            call=data["call"],
            checks=checks,
            warnings=data["warnings"],
            correction=data["correction"],
            correction_notes=data["correction_notes"],
        )

    def findings(self) -> list[Finding]:
        """Every finding of every check, in check order."""
        return [f for name in STATIC_CHECKS for f in self.checks[name].findings]


# --- semantic stage -------------------------------------------------------------------------

SemanticStatus = Literal["passed", "failed", "uncertain", "error", "skipped"]


class SemanticCorrection(_Frozen):
    """What the judge suggests instead, when it finds an issue."""

    suggested_arguments: dict[str, Any] | None = None
    better_function: str | None = None
    missing_prerequisite: str | None = None


class SemanticCheckResult(_Frozen):
    """One judge check: a 1-5 score (higher is more valid) with its evidence."""

    status: SemanticStatus
    score: int | None = None
    confidence: float | None = None
    evidence: tuple[str, ...] = ()
    """Exact quotes from the conversation, tool outputs or spec."""
    explanation: str = ""
    correction: SemanticCorrection | None = None
    error: str | None = None
    """Why the check could not be answered (status `error`)."""
    notes: tuple[str, ...] = ()
    """What was coerced or dropped to read the judge's answer (e.g. `score given as text,
    read as 4`, `the suggested better_function is not one of the tools; dropped`)."""


class CheckReply(NamedTuple):
    """The judge's answer for one check, read locally (`semantic.read_check`): the score is an
    integer 1-5; what had to be coerced or dropped to read the rest is listed in `notes`."""

    score: int
    explanation: str = ""
    confidence: float | None = None
    """None when the judge gave none (or none we could read)."""
    evidence: tuple[str, ...] = ()
    correction: SemanticCorrection | None = None
    notes: tuple[str, ...] = ()


ValueSourceKind = Literal["user", "assistant", "tool", "system", "default", "enum"]


class ValueSource(_Frozen):
    """One place an argument value was found."""

    kind: ValueSourceKind
    index: int | None = None
    """For conversation sources, the 0-based index of that turn among turns of its kind
    (user turn k, tool output j); None for spec sources."""
    message_index: int | None = None
    """Position of the message in the whole history, for conversation sources."""
    quote: str = ""


class ValueGrounding(_Frozen):
    """Where one argument value appears; no sources means it appears nowhere."""

    path: str
    value: Any
    sources: tuple[ValueSource, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def grounded(self) -> bool:
        """True when the value was found somewhere."""
        return bool(self.sources)

    @classmethod
    def from_data(cls, data: GroundingData) -> ValueGrounding:
        """The grounding of one value from the checker's plain data (`grounding.ground`),
        built without validation (see `StaticResult.from_data`)."""
        return trusted(
            cls,
            path=data["path"],
            value=data["value"],
            sources=tuple(trusted_from(ValueSource, source) for source in data["sources"]),
        )


class JudgeUsage(_Frozen):
    """Judge traffic for one reflection, summed over retries."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = 0.0
    """USD for these requests; None (JSON null) when requests were made at a price nobody
    configured or knows (see `JudgeConfig.prices`); 0.0 when no request was made."""
    prompt_chars: int = 0

    @classmethod
    def total(cls, usages: Iterable[JudgeUsage]) -> JudgeUsage:
        """The field-by-field sum of `usages` (`results.total_usage`); the cost is None when any part's cost is."""
        data: list[UsageData] = [u.model_dump() for u in usages]  # type: ignore[misc]
        return cls(**total_usage(data)) if data else cls()


class ReflectionResult(_Frozen):
    """Everything known about one call: static checks, grounding, judge checks and the verdict."""

    call: ToolCall
    static: StaticResult
    grounding: tuple[ValueGrounding, ...] = ()
    semantic: dict[str, SemanticCheckResult] = Field(default_factory=dict)
    judge_skipped: str | None = None
    """Why the judge did not run (static failure, no judge configured...), when it did not."""
    overall_valid: bool | None = None
    """Static valid AND every semantic check passed; None when a judge check errored."""
    usage: JudgeUsage = JudgeUsage()
    warnings: tuple[str, ...] = ()

    def flat(self) -> dict[str, float]:
        """Flat float keys, absent when not computed (see README: public contract; `results.flat_keys`)."""
        return flat_keys(self.flat_fields())

    def flat_fields(self) -> ResultData:
        """The part of this result its flat keys are computed from, as plain data:
        `model_dump(mode="json", include=results.FLAT_FIELDS)`, built directly for a fraction
        of the dump's cost."""
        return {
            "static": {
                "checks": {
                    name: {"passed": check.passed}  # type: ignore[typeddict-item]
                    for name, check in self.static.checks.items()
                }
            },
            "semantic": {name: {"status": check.status, "score": check.score} for name, check in self.semantic.items()},
            "overall_valid": self.overall_valid,
        }

    def feedback(self, max_chars: int = 2000, action: Literal["reflect", "deny", "escalate"] = "reflect") -> str | None:
        """Plain text an agent's model can act on, or None when the call is valid.

        Lists each failing check with its parameters, what was expected, the correction when
        one exists and the judge's explanation; checks the judge could not answer are named
        too. Deterministic, no markup, control characters removed from untrusted text, names
        quoted, and at most `max_chars` characters. `action` is what the gate does with the call:
        `reflect` asks the model to propose it again; `deny` and `escalate` say it will not run,
        or waits for a person, and list the problems without inviting a retry.
        """
        if self.overall_valid is True:
            return None
        if max_chars < 20:
            raise ValueError(f"max_chars must be at least 20, got {max_chars}")
        lines = [f"The call to {quoted(self.call.name)} {FEEDBACK_HEADERS[action]}:"]
        for check in STATIC_CHECKS:
            result = self.static.checks[check]
            if result.passed:
                continue
            if not result.findings:
                lines.append(f"- {check}")
            for finding in result.findings[:_FEEDBACK_FINDINGS]:
                lines.append(f"- {check}: {_finding_text(finding)}")
            if len(result.findings) > _FEEDBACK_FINDINGS:
                lines.append(f"  ({len(result.findings) - _FEEDBACK_FINDINGS} more like this)")
        for check in SEMANTIC_CHECKS:
            semantic = self.semantic.get(check)
            if semantic is None or semantic.status == "passed":
                continue
            if semantic.status == "failed":
                lines.append(
                    f"- {check} (score {semantic.score}/5): {plain_line(semantic.explanation) or 'no explanation given'}"
                )
                parameters = self._implicated(semantic)
                if parameters:
                    lines.append(f"  parameters: {', '.join(parameters)}")
                lines.extend(_correction_lines(semantic.correction))
            elif semantic.status == "uncertain":
                lines.append(
                    f"- {check} could not be confirmed (judge confidence {semantic.confidence}): "
                    f"{plain_line(semantic.explanation) or 'no explanation given'}"
                )
            elif semantic.status == "error":
                lines.append(f"- {check} could not be checked: {plain_line(semantic.error or 'the judge failed')}")
            elif semantic.status == "skipped":
                lines.append(f"- {check} not assessed: {plain_line(semantic.explanation) or 'not assessable here'}")
        correction = self.static.correction
        if correction is not None:
            lines.append(
                f"Suggested call (passes the static checks): {quoted(correction.name)} "
                f"{_plain_value(correction.arguments)}"
            )
        return shorten("\n".join(lines), max_chars)

    def _implicated(self, semantic: SemanticCheckResult) -> list[str]:
        """Argument paths a failed judge check is about: those its evidence, explanation or
        suggested arguments point at, and those whose value grounding found nowhere."""
        said = " ".join((*semantic.evidence, semantic.explanation)).lower()
        suggested = semantic.correction.suggested_arguments if semantic.correction else None
        out = []
        for value in self.grounding:
            key = value.path.rsplit(".", 1)[-1].split("[", 1)[0]
            text = "" if isinstance(value.value, (dict, list)) else str(value.value).lower()
            pointed = (
                _mentions(said, key.lower())
                or (len(text) >= 2 and _mentions(said, text))
                or (
                    suggested is not None
                    and key in suggested
                    and suggested[key] != (self.call.arguments or {}).get(key)
                )
            )
            if not value.grounded:
                out.append(f"{_path(value.path)} (value {_plain_value(value.value)} not found in the conversation)")
            elif pointed:
                out.append(_path(value.path))
        return out


_FEEDBACK_FINDINGS = 5
_PLAIN_PATH = re.compile(r"[\w$.\[\]-]*")


def _path(path: str) -> str:
    """An argument path as written when it is plain (`$.items[0].qty`), else quoted: paths
    carry the call's own keys."""
    return path if _PLAIN_PATH.fullmatch(path) else quoted(path, FEEDBACK_LIMIT)


def _finding_text(finding: Finding) -> str:
    """A finding's message with its path quoted when the path carries unusual keys."""
    message = plain_line(finding.message)
    plain_path = plain_line(finding.path)
    shown = _path(finding.path)
    if message.startswith(plain_path):
        return shown + message[len(plain_path) :]
    return f"{shown}: {message}"


def _mentions(text: str, needle: str) -> bool:
    """`needle` occurs in `text` as a whole token ("id" is not in "evidence", "40" not in "400")."""
    return bool(needle) and re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", text) is not None


def _plain_value(value: Any) -> str:
    """A value as one plain line of its JSON text (or its `str` when it is not JSON)."""
    try:
        text = dumps(value)
    except (TypeError, ValueError):
        text = str(value)
    return plain_line(text)


def _correction_lines(correction: SemanticCorrection | None) -> list[str]:
    if correction is None:
        return []
    lines = []
    if correction.suggested_arguments is not None:
        lines.append(f"  suggested arguments: {_plain_value(correction.suggested_arguments)}")
    if correction.better_function:
        lines.append(f"  better tool: {quoted(correction.better_function)}")
    if correction.missing_prerequisite:
        lines.append(f"  first: {plain_line(correction.missing_prerequisite)}")
    return lines
