"""The static stage: check a tool call against its tool's JSON Schema before it runs.

`check_call` and `check_calls` answer every one of the nine `STATIC_CHECKS` for each call,
pass or fail, with findings that say where (a JSON path into the arguments), what was
expected, what was found, and which JSON Schema keyword failed.

How a violation is sorted into a check (each lands in exactly one):

- an argument name the tool does not define: `non_existent_parameter`. At the top level
  this holds even without `additionalProperties: false` (agents must not invent
  parameters); nested objects only when their schema forbids extra names. A name is defined
  wherever the validator would look for it (`_schemas.names_at`: through every reference and
  in-place branch, and in `required` / `dependentRequired` / `dependencies`); a schema with
  no `properties` at all accepts any name, as JSON Schema does.
- a wrong JSON type at any depth, or a union (`anyOf`/`oneOf`) whose every branch rejects
  the value's type: `incorrect_parameter_type`. When exactly one branch accepts the value's
  type, that branch's own errors are reported instead.
- a missing required property at any depth (also `dependentRequired`): `missing_required_parameter`.
- `enum` or `const`: `allowed_values_violation`.
- anything else the schema rejects: `json_schema_violation`.

The gating checks (`invalid_tool_call`, `empty_api_spec`, `invalid_api_spec`,
`non_existent_function`) stop the argument checks: those then pass vacuously, and the
gating finding says "arguments not checked".

A spec without `$schema` is read in the draft `_schemas.draft_of` gives (2020-12, or draft 7
when it uses a form only draft 7 has). A schema whose references multiply past
`_schemas.MAX_EXPANSION` evaluations at one place of a value, or that loops in place, is an
`invalid_api_spec`; at most `MAX_ERRORS` validation errors are classified per call.

Compiled validators are cached by schema content (bounded, so memory stays flat on streams
of ever-new schemas); a valid call costs one compiled `is_valid` plus a set check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from hashlib import blake2b
from typing import Any
from urllib.parse import unquote

import jsonschema_rs
import orjson

from reflection._corrections import closest_name, suggest_correction
from reflection._json import (
    FINITE,
    SOUND,
    canonical_bytes,
    dumps,
    json_type,
    require_json_like,
    value_problem,
    vouched,
)
from reflection._lru import LRU, set_cache_size
from reflection._schemas import (
    DRAFT4,
    DRAFT6,
    DRAFT7,
    DRAFT2019,
    DRAFT2020,
    MAX_EXPANSION,
    Document,
    draft_of,
    expansion,
    has_references,
    names_at,
)
from reflection._text import shorten
from reflection.formats import checked_call, normalize_raw_calls, normalize_tools
from reflection.model import SpecProblem, StaticResult, ToolCall, ToolInventory, ToolSpec
from reflection.results import ALL_PASSED, FindingData, StaticData

__all__ = ["Prepared", "check_call", "check_call_data", "check_calls", "prepare", "set_cache_size"]

_GATING = ("invalid_tool_call", "empty_api_spec", "invalid_api_spec", "non_existent_function")
_NOT_CHECKED = "Arguments not checked"

# Output stays proportional to the input: a finding repeats at most MAX_LISTED allowed values
# or names (its message says how many there are), and a check lists at most MAX_FINDINGS
# findings, then one more saying how many were left out.
MAX_FINDINGS = 20
"""Findings listed per failing check; a last finding (path `$`) counts the rest."""
MAX_LISTED = 10
"""Allowed values (`enum`) or parameter names a finding's `expected` repeats."""


# --- public API ----------------------------------------------------------------------------


def check_call(call: Any, tools: Any) -> StaticResult:
    """Check one tool call against the tool specs, answering all nine static checks.

    `call` is a `ToolCall` or any supported raw shape (OpenAI, Anthropic, plain
    `{"name", "arguments"}`, or a JSON string of one); `tools` is a `ToolInventory` or any
    raw spec list `normalize_tools` accepts. Bad data never raises: it becomes a failing
    check. Objects that are not JSON-like raise `TypeError` naming the argument.

    When `call` holds several calls (a parallel-call message), the result fails
    `invalid_tool_call` and says to use `check_calls`.

    When the called name is unknown but some specs could not be read at all (not even
    their name), the result fails `invalid_api_spec` rather than `non_existent_function`:
    the called tool may be among the unreadable specs, so blaming the agent would be a guess.
    """
    calls = _calls_of(call, "call")
    if len(calls) != 1:
        calls = [
            ToolCall(
                name="",
                error=f"got {len(calls)} tool calls but check_call checks exactly one; "
                "use check_calls to check parallel calls one by one",
            )
        ]
    prepared = prepare(_inventory_of(tools))
    return _check(calls[0], prepared)


def check_calls(calls: Any, tools: Any) -> list[StaticResult]:
    """Check parallel calls: each call is checked and reported on its own, in order.

    `calls` is a list of calls, an assistant message carrying several (`tool_calls` or
    Anthropic `tool_use` blocks), or a single call; `tools` as for `check_call`.
    """
    prepared = prepare(_inventory_of(tools))
    return [_check(one, prepared) for one in _calls_of(calls, "calls")]


# --- inputs --------------------------------------------------------------------------------


def _calls_of(raw: Any, argument: str) -> list[ToolCall]:
    if isinstance(raw, ToolCall):
        return [checked_call(raw, argument)]
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(c, ToolCall) for c in raw):
        return [checked_call(c, argument) for c in raw]
    try:
        return normalize_raw_calls(raw)  # normalize_calls, whose ToolCall cases were handled above
    except TypeError as exc:
        if argument != "call" and str(exc).startswith("call:"):
            raise TypeError(f"{argument}:{str(exc)[5:]}") from None
        raise


# Key order is kept (not sorted): rows from one producer repeat it, and sorting costs more
# than the occasional miss, which normalize_tools' own content cache absorbs.
_KEY_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_RAW_TOOLS = LRU()  # hash of the tool list's JSON -> (the list, its inventory)


def _inventory_of(tools: Any) -> ToolInventory:
    """`normalize_tools(tools)`, with a shortcut for raw tool lists seen before.

    Logs repeat the same tool list on every row; re-walking it to prove it is JSON-like
    costs more than the whole check. The shortcut needs byte-identical JSON AND
    Python equality with a list that already passed `normalize_tools`, so it returns what
    `normalize_tools` would and never lets a non-JSON object through (orjson refuses most;
    the few it serialises natively, like UUID or plain Enum, are not equal to JSON values).
    """
    if type(tools) is not list:
        return normalize_tools(tools)
    try:
        text = orjson.dumps(tools, option=_KEY_OPTIONS)
    except TypeError:  # big integers, surrogates, non-JSON objects: the exact path decides
        return normalize_tools(tools)
    key = hash(text)  # a collision only costs a miss: the equality test guards every hit
    hit = _RAW_TOOLS.get(key)
    if hit is not None and hit[0] == tools:
        return hit[1]
    inventory = normalize_tools(tools)
    _RAW_TOOLS.put(key, (orjson.loads(text), inventory))
    return inventory


# --- compiled schemas ----------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class _Schema:
    """Everything computed once per distinct parameters schema."""

    schema: dict[str, Any]
    validator: Any  # jsonschema_rs.Validator, None when the schema does not compile
    problem: str | None = None
    problem_keyword: str | None = None
    defined: frozenset[str] = frozenset()
    names: tuple[str, ...] = ()
    open: bool = False
    """True when any top-level name is allowed (truthy additionalProperties)."""
    name_patterns: Any = None
    """Compiled check of patternProperties regexes, for names not in `defined`."""
    forbids_extra: bool = False
    """The top level itself says additionalProperties: false."""
    known: str = "it takes no parameters"
    """How messages about an unknown parameter list the defined ones."""
    draft: str = DRAFT2020
    """The draft the schema is read in (`_schemas.draft_of`)."""


_SCHEMAS = LRU()  # digest of the canonical schema -> its compiled entry
# The same, by the identity of a schema the library built and vouched for (`_json.vouched`): the
# specs `formats` keeps. A new tool list drawn from tools seen before, in other lists, then costs
# a look-up per tool, not the canonical JSON and digest of each schema (the entry keeps the schema
# alive, so its id stays its own).
_REFS = LRU()

BACKTRACK_LIMIT = 50_000
"""Backtracking steps one regex match may take. Patterns with backreferences or look-around
run on a backtracking engine (fancy-regex; its own default is 1,000,000 steps, up to about
0.1 s per value); past this limit the engine gives up, and the call fails `invalid_api_spec`:
the pattern, not the value, is at fault. It bounds a row's regex work to this many steps
per value checked (a few milliseconds at most)."""
_PATTERN_OPTIONS = jsonschema_rs.FancyRegexOptions(backtrack_limit=BACKTRACK_LIMIT)


def _compiled(schema: dict[str, Any]) -> bytes | _Schema:
    """The cache key of `schema`'s compiled entry (compiling it if needed), or the entry
    itself when it does not compile (small, and not worth compiling again)."""
    hit = _REFS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    ref = _compiled_by_content(schema)
    if vouched(schema):
        _REFS.put(id(schema), (schema, ref))
    return ref


def _compiled_by_content(schema: dict[str, Any]) -> bytes | _Schema:
    shape = require_json_like(schema, "tools")  # a hand-built ToolSpec may hold anything
    if not shape & FINITE:  # canonical bytes would write NaN as null: keep them apart
        return _Schema(
            schema=schema,
            validator=None,
            problem="its parameters schema contains NaN or Infinity, which JSON cannot represent",
        )
    if not shape & SOUND:
        return _Schema(
            schema=schema,
            validator=None,
            problem=f"its parameters schema cannot be used: it has {value_problem(schema)}",
        )
    # A 128-bit digest of the canonical JSON: collision-free in practice, and small enough
    # that prepared inventories can hold it (the canonical bytes themselves run to kilobytes).
    canonical = canonical_bytes(schema)
    key = blake2b(canonical, digest_size=16).digest()
    entry = _SCHEMAS.get(key)
    if entry is None:
        entry = _compile(schema, hint=canonical)
        _SCHEMAS.put(key, entry)
    return key if entry.validator is not None else entry


def _schema_for(tool: ToolSpec, ref: bytes | _Schema) -> _Schema:
    # Prepared inventories hold keys, not validators, so only the bounded cache keeps
    # validators alive; one evicted since is compiled again.
    if isinstance(ref, _Schema):
        return ref
    entry = _SCHEMAS.get(ref)
    if entry is None:
        entry = _compile(tool.parameters)
        _SCHEMAS.put(ref, entry)
    return entry


_VALIDATORS = {
    DRAFT4: jsonschema_rs.Draft4Validator,
    DRAFT6: jsonschema_rs.Draft6Validator,
    DRAFT7: jsonschema_rs.Draft7Validator,
    DRAFT2019: jsonschema_rs.Draft201909Validator,
    DRAFT2020: jsonschema_rs.Draft202012Validator,
}


def _compile(schema: dict[str, Any], hint: bytes | None = None) -> _Schema:
    """`schema` compiled; `hint`: its canonical JSON, which lets the walks for references and
    draft-7 keywords be skipped when none can occur."""
    refs = hint is None or has_references(hint)
    cycle = _ref_cycle(schema) if refs else None
    if cycle is not None:
        return _Schema(
            schema=schema,
            validator=None,
            problem_keyword="$ref",
            problem=(
                f"its schema has a $ref cycle ({' -> '.join(cycle)}): following it never reaches a check, so it "
                "would accept any value; make one schema on the cycle say what it allows instead of referring on"
            ),
        )
    draft = draft_of(schema, hint)
    try:
        if isinstance(schema.get("$schema"), str):  # declared: the validator reads it
            validator = jsonschema_rs.validator_for(
                schema, validate_formats=True, offline=True, pattern_options=_PATTERN_OPTIONS
            )
        else:
            validator = _VALIDATORS[draft](
                schema, validate_formats=True, offline=True, pattern_options=_PATTERN_OPTIONS
            )
    except (ValueError, jsonschema_rs.ReferencingError) as exc:  # ValidationError is a ValueError
        message, keyword = _compile_problem(schema, exc)
        return _Schema(schema=schema, validator=None, problem=message, problem_keyword=keyword)
    # Without references a schema is a tree: one place of a value meets each subschema once at most.
    document = Document(schema, draft, hint) if refs else None
    cost, loop = expansion(schema, draft, document) if refs else (0, None)
    if loop is not None:
        return _Schema(
            schema=schema,
            validator=None,
            problem_keyword="$ref",
            problem=(
                f"its schema refers back to itself without consuming the value ({loop}): evaluating it never "
                "reaches an end; make one schema on the loop say what it allows instead of referring on"
            ),
        )
    if cost > MAX_EXPANSION:
        return _Schema(
            schema=schema,
            validator=None,
            problem_keyword="$ref",
            problem=(
                f"its schema expands too far: one place of a value can need more than {MAX_EXPANSION:,} subschema "
                "evaluations (its references multiply, each level referring to the next more than once), which "
                "would cost exponential time; refer to each definition once per level, or inline a shared one"
            ),
        )
    defined = names_at(document, schema, schema, draft)
    names, patterns, is_open = list(defined.names), defined.patterns, defined.open
    name_patterns = None
    if patterns and not is_open:
        try:
            name_patterns = jsonschema_rs.validator_for(
                {"anyOf": [{"pattern": p} for p in patterns]}, pattern_options=_PATTERN_OPTIONS
            )
        except ValueError:  # the main schema compiled, so its patterns do; be safe anyway
            is_open = True
    listing = ", ".join(names[:30])
    return _Schema(
        schema=schema,
        validator=validator,
        defined=frozenset(names),
        names=tuple(names),
        open=is_open,
        name_patterns=name_patterns,
        forbids_extra=schema.get("additionalProperties") is False,
        known=f"its parameters: {listing}" if listing else "it takes no parameters",
        draft=draft,
    )


def _compile_problem(schema: dict[str, Any], exc: Exception) -> tuple[str, str | None]:
    text = getattr(exc, "message", None) or str(exc)
    remote = [ref for ref in _refs(schema) if not ref.startswith("#")]
    if remote and ("retriev" in text.lower() or "base uri" in text.lower() or "registry" in text.lower()):
        shown = ", ".join(f'"{r}"' for r in remote[:3])
        message = (
            f"its schema uses a remote $ref ({shown}); remote refs are never fetched (checks run offline). "
            'Inline the referenced schema under "$defs" and refer to it as "#/$defs/<name>"'
        )
        return message, "$ref"
    where = getattr(exc, "instance_path", None)
    if where:
        location = "/" + "/".join(str(p) for p in where)
        return f"its parameters schema is not a valid JSON Schema at {location}: {text}", None
    return f"its parameters schema is not a valid JSON Schema: {text}", None


def _refs(node: Any, depth: int = 0) -> list[str]:
    if depth > 100:
        return []
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            found.extend(_refs(value, depth + 1))
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item, depth + 1)]
    return []


def _ref_cycle(root: dict[str, Any]) -> list[str] | None:
    """The first chain of local `$ref`s that comes back to where it started, else None.

    Following a `$ref` stays at the same place in the value, so such a chain never reaches
    a check; jsonschema-rs compiles it as a schema that accepts everything.
    """
    done: set[str] = set()  # refs whose chain is known to end
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and ref not in done:
                chain: list[str] = []
                while isinstance(ref, str) and ref.startswith("#") and ref not in done:
                    if ref in chain:
                        return [*chain[chain.index(ref) :], ref]
                    chain.append(ref)
                    target = _resolve_pointer(root, ref)
                    ref = target.get("$ref") if isinstance(target, dict) else None
                done.update(chain)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _resolve_pointer(root: Any, ref: str) -> Any:
    node = root
    pointer = unquote(ref[1:])
    if not pointer:
        return root
    if not pointer.startswith("/"):
        return None  # anchors are not followed for name collection
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _schema_at(root: Any, schema_path: list[Any]) -> Any:
    node = root
    for part in schema_path:
        if isinstance(node, dict) and isinstance(part, str):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


# --- per inventory -------------------------------------------------------------------------


@dataclass(slots=True)
class Prepared:
    """A tool inventory as the checker uses it (`prepare`): each tool by name with its compiled
    schema, and the problems its calls are told about."""

    inventory: ToolInventory
    tools: dict[str, tuple[ToolSpec, bytes | _Schema]]
    names: tuple[str, ...]
    problems: tuple[SpecProblem, ...]
    unnamed: tuple[SpecProblem, ...]
    broken: tuple[tuple[str, str], ...] = ()
    """(tool name, warning) for tools whose schema does not compile."""
    empty: bool = False
    """`inventory.empty`, read on every call (a plain attribute is cheaper than a model field)."""


_PREPARED = LRU()  # id(inventory) -> (inventory, its prepared form)


def prepare(inventory: ToolInventory) -> Prepared:
    """`inventory` prepared for `check_call_data`, once per inventory (its schemas compiled the
    first time they are seen)."""
    # Keyed by identity (normalize_tools returns one object per distinct spec list); the
    # entry keeps the inventory alive, so its id cannot be reused while cached.
    hit = _PREPARED.get(id(inventory))
    if hit is not None and hit[0] is inventory:
        return hit[1]
    tools: dict[str, tuple[ToolSpec, bytes | _Schema]] = {}
    broken: list[tuple[str, str]] = []
    for tool in inventory.tools:
        if tool.name in tools:
            continue
        ref = _compiled(tool.parameters)
        tools[tool.name] = (tool, ref)
        if isinstance(ref, _Schema):
            broken.append((tool.name, f"tool {tool.name!r} cannot be checked: {ref.problem}"))
    prepared = Prepared(
        inventory=inventory,
        tools=tools,
        names=tuple(tools),
        problems=inventory.problems,
        unnamed=tuple(p for p in inventory.problems if p.name is None),
        broken=tuple(broken),
        empty=inventory.empty,
    )
    _PREPARED.put(id(inventory), (inventory, prepared))
    return prepared


def _problem_warning(problem: SpecProblem) -> str:
    return f"ignored a tool spec: {problem.message}"


# --- issues --------------------------------------------------------------------------------

_MISSING: Any = object()


@dataclass(slots=True)
class _Issue:
    """A finding plus what corrections need: the instance path as segments and the value."""

    check: str
    segments: tuple[str | int, ...]
    message: str
    expected: Any = None
    actual: Any = None
    keyword: str | None = None
    at: tuple[str | int, ...] = ()
    """Instance path of the failing value (the object, for a missing property)."""
    value: Any = _MISSING
    types: tuple[str, ...] = ()
    options: tuple[Any, ...] = field(default=())
    capped: bool = False
    """Errors stopped being collected at `MAX_ERRORS`: more may have been left out."""
    owner: Any = None
    """For a name the validator rejects (`additionalProperties: false`): its `_Schema`, to
    tell whether the schema defines the name elsewhere (then no correction removes it)."""

    @property
    def removable(self) -> bool:
        """For an unknown name: whether a correction may remove it (the schema defines it nowhere)."""
        if self.owner is None:
            return True
        return not _defined_at(self.owner, self.at, self.segments[-1])

    @property
    def path(self) -> str:
        return _path(self.segments)

    def finding(self) -> FindingData:
        """The finding as plain data: `Finding`'s fields in order."""
        return {
            "check": self.check,
            "path": self.path,
            "message": self.message,
            "expected": self.expected,
            "actual": self.actual,
            "keyword": self.keyword,
        }


Failures = dict[str, list[_Issue]]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@lru_cache(maxsize=4096)  # the same few locations fail again and again; bounded
def _path(segments: tuple[str | int, ...]) -> str:
    """JSON path of an instance location: `$.items[0].qty`, `$['odd key']`."""
    out = ["$"]
    for part in segments:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.match(part):
            out.append("." + part)
        else:
            out.append("['" + part.replace("\\", "\\\\").replace("'", "\\'") + "']")
    return "".join(out)


def _matches_type(value: Any, expected: str) -> bool:
    actual = json_type(value)
    if actual == expected:
        return True
    if expected == "number":
        return actual == "integer"
    return expected == "integer" and isinstance(value, float) and value.is_integer()


def _show(value: Any, limit: int = 80) -> str:
    try:
        text = dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return shorten(text, limit, ellipsis="...")


def _either(items: list[str] | tuple[str, ...], word: str = "or") -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _choices(options: list[Any] | tuple[Any, ...], limit: int = 10) -> str:
    shown = [_show(o, 40) for o in options[:limit]]
    more = f" (and {len(options) - limit} more)" if len(options) > limit else ""
    return ", ".join(shown) + more


# --- the checker ---------------------------------------------------------------------------


def _check(call: ToolCall, prepared: Prepared) -> StaticResult:
    return StaticResult.from_data(check_call_data(call, prepared))


def check_call_data(call: ToolCall, prepared: Prepared) -> StaticData:
    """The static result of a normalised `call` against a `prepare`d inventory, as plain data
    (`results.StaticData`): what `check_call` returns, before any model is built. The CLI
    writes it as it is; `StaticResult.from_data` builds the model. Passing checks share
    `results.CHECK_PASSED` (a call that passes them all, `results.ALL_PASSED`); never mutate it."""
    failures, warnings = _evaluate(call, prepared)
    if not failures:
        return {
            "call": call,
            "checks": ALL_PASSED,
            "warnings": warnings,
            "correction": None,
            "correction_notes": (),
            "valid": True,
        }
    capped = next(iter(failures.values()))[-1].capped  # set on every issue of a capped call
    correction, notes = (
        (None, []) if capped else suggest_correction(call, failures, lambda c: _evaluate(c, prepared)[0])
    )
    if correction is not None and _removes_defined(call, correction, prepared):
        correction, notes = None, []
    checks = dict(ALL_PASSED)
    for name, issues in failures.items():
        findings = [issue.finding() for issue in issues[:MAX_FINDINGS]]
        if len(issues) > MAX_FINDINGS or issues[-1].capped:
            findings.append(_omitted(name, len(issues) - MAX_FINDINGS, issues[-1].capped))
        checks[name] = {"passed": False, "findings": findings}
    return {
        "call": call,
        "checks": checks,
        "warnings": warnings,
        "correction": correction,
        "correction_notes": tuple(notes),
        "valid": False,
    }


def _omitted(check: str, count: int, capped: bool = False) -> FindingData:
    if capped:
        count = max(count, 0)
        return {
            "check": check,
            "path": "$",
            "message": f"{count} more {check} finding(s) not listed, and more may "
            f"exist: a check lists its first {MAX_FINDINGS}, and errors stop being collected after {MAX_ERRORS:,} "
            "per call. Fix those and check again.",
            "expected": None,
            "actual": count,
            "keyword": None,
        }
    return {
        "check": check,
        "path": "$",
        "message": f"{count} more {check} finding(s) not listed: a check lists "
        f"its first {MAX_FINDINGS}. Fix those and check again.",
        "expected": None,
        "actual": count,
        "keyword": None,
    }


def _removes_defined(call: ToolCall, correction: ToolCall, prepared: Prepared) -> bool:
    """Whether `correction` drops a top-level argument its tool's schema defines (never offered:
    the corrections' own rules allow no such fix; this holds them to it)."""
    before = call.arguments or {}
    after = correction.arguments or {}
    if after.keys() >= before.keys():
        return False
    found = prepared.tools.get(correction.name)
    if found is None:
        return True
    schema = _schema_for(*found)
    return any(_defined_at(schema, (), key) for key in before if key not in after)


def _evaluate(call: ToolCall, prepared: Prepared) -> tuple[Failures, tuple[str, ...]]:
    """All failing checks of `call`, and the warnings about other tools' specs."""
    failures: Failures = {}
    name = call.name
    if call.error is not None:
        failures["invalid_tool_call"] = [
            _Issue(
                "invalid_tool_call",
                (),
                f"The tool call is malformed: {call.error}. {_NOT_CHECKED}: send a call "
                "with a function name and a JSON object of arguments.",
                expected="a function name and a JSON object of arguments",
                actual=call.raw_arguments,
            )
        ]
    if prepared.empty:
        failures["empty_api_spec"] = [
            _Issue(
                "empty_api_spec",
                (),
                f"No tool specs were given, so the call cannot be checked. {_NOT_CHECKED}: "
                "pass the tool specs the agent was offered.",
                expected="at least one tool spec",
                actual=0,
            )
        ]
        return failures, ()
    named = bool(name.strip())  # a blank name is already an invalid_tool_call
    found = prepared.tools.get(name) if named else None
    excluded: str | None = name if found is not None else None
    skip_unnamed = False
    if named and found is None:
        problem = next((p for p in prepared.problems if p.name == name), None)
        if problem is not None:
            excluded = name
            failures["invalid_api_spec"] = [
                _Issue(
                    "invalid_api_spec",
                    (),
                    f"The spec of tool {name!r} is unusable: {problem.message}. {_NOT_CHECKED}: fix the tool spec.",
                    expected="a readable tool spec",
                    actual=problem.message,
                )
            ]
        elif prepared.unnamed:
            skip_unnamed = True
            count = len(prepared.unnamed)
            failures["invalid_api_spec"] = [
                _Issue(
                    "invalid_api_spec",
                    (),
                    f"Tool {name!r} is not among the readable specs, and {count} spec(s) "
                    f"could not be read at all, so the called tool may be one of them. {_NOT_CHECKED}: fix the "
                    "unreadable specs (" + "; ".join(p.message for p in prepared.unnamed[:3]) + ").",
                    expected="readable tool specs",
                    actual=[p.message for p in prepared.unnamed],
                )
            ]
        else:
            defined = list(prepared.names)
            guess = closest_name(name, defined)
            hint = f' Did you mean "{guess}"?' if guess else ""
            listing = ", ".join(defined[:20]) + (f" (and {len(defined) - 20} more)" if len(defined) > 20 else "")
            failures["non_existent_function"] = [
                _Issue(
                    "non_existent_function",
                    (),
                    f"No tool named {name!r} is defined. {_NOT_CHECKED}. Defined tools: {listing or 'none'}.{hint}",
                    expected=defined,
                    actual=name,
                    options=(guess,) if guess else (),
                )
            ]
    schema = _schema_for(*found) if found is not None else None
    if schema is not None and schema.validator is None:
        failures["invalid_api_spec"] = [
            _Issue(
                "invalid_api_spec",
                (),
                f"The spec of tool {name!r} is unusable: {schema.problem}. {_NOT_CHECKED}: fix the tool spec.",
                expected="a valid JSON Schema",
                actual=schema.problem,
                keyword=schema.problem_keyword,
            )
        ]
    warnings = _warnings(prepared, excluded, skip_unnamed) if prepared.problems or prepared.broken else ()
    if failures or schema is None:
        return failures, warnings
    arguments = call.arguments
    if arguments is None:
        arguments = {}
    try:
        issues = _check_arguments(arguments, schema, name)
    except _PatternGaveUp as exc:
        failures["invalid_api_spec"] = [
            _Issue(
                "invalid_api_spec",
                exc.at,
                f"{_path(exc.at)}: the spec of tool {name!r} cannot be checked on this "
                f"value: the regex engine gave up on its pattern{' ' + _show(exc.pattern) if exc.pattern else ''} "
                f"({exc.reason}; the limit is {BACKTRACK_LIMIT} backtracking steps, and backreferences and "
                f"look-around are matched by backtracking). {_NOT_CHECKED}: simplify the pattern.",
                expected="a pattern the regex engine can match in bounded time",
                actual=exc.reason,
                keyword="pattern",
            )
        ]
        return failures, warnings
    for issue in issues:
        failures.setdefault(issue.check, []).append(issue)
    return failures, warnings


def _warnings(prepared: Prepared, excluded: str | None, skip_unnamed: bool) -> tuple[str, ...]:
    # Called only when the inventory has problems or broken tools (most have neither).
    out = [
        _problem_warning(p)
        for p in prepared.problems
        if not (p.name is not None and p.name == excluded and excluded not in prepared.tools)
        and not (p.name is None and skip_unnamed)
    ]
    out.extend(message for tool, message in prepared.broken if tool != excluded)
    return tuple(out)


def _check_arguments(args: dict[str, Any], schema: _Schema, tool: str) -> list[_Issue]:
    unknown: list[str] = []
    if not schema.open and not schema.defined.issuperset(args):
        unknown = [k for k in args if k not in schema.defined]
        if schema.name_patterns is not None:
            unknown = [k for k in unknown if not schema.name_patterns.is_valid(k)]
            for key in unknown:
                _raise_if_gave_up(schema.name_patterns.iter_errors(key), None, (key,))
    valid = schema.validator.is_valid(args)
    if valid and not unknown:
        return []
    issues: list[_Issue] = []
    capped = False
    if not valid:
        for count, error in enumerate(schema.validator.iter_errors(args)):
            if count == MAX_ERRORS:
                capped = True
                break
            _classify(error, issues, schema.schema)  # raises _PatternGaveUp where the regex engine gave up
    issues.extend(_unknown(key, args, schema, tool) for key in unknown)
    issues = _tidy(issues)
    for issue in issues:
        if issue.keyword == "additionalProperties":
            if issue.check == "non_existent_parameter":
                issue.owner = schema
            elif issue.expected is False:  # the validator's report of an object that allows no name
                return _check_arguments_closed(args, schema, tool, unknown, capped)
        issue.capped = capped
    return issues


def _unknown(key: str, args: dict[str, Any], schema: _Schema, tool: str) -> _Issue:
    """The issue of a top-level argument name the schema defines nowhere."""
    return _Issue(
        "non_existent_parameter",
        (key,),
        f'{_path((key,))}: "{key}" is not a parameter of tool {tool!r} '
        f"({schema.known}). Remove it or use a defined parameter.",
        expected=list(schema.names[:MAX_LISTED]),
        actual=key,
        keyword="additionalProperties" if schema.forbids_extra else "properties",
        at=(),
        value=args[key],
    )


def _check_arguments_closed(
    args: dict[str, Any], schema: _Schema, tool: str, unknown: list[str], capped: bool
) -> list[_Issue]:
    """`_check_arguments` where some object's schema allows no name at all (`additionalProperties:
    false` and no `properties`): the validator reports that as one false-schema error at the
    object, naming no key; here every key of such an object is a `non_existent_parameter`."""
    issues: list[_Issue] = []
    for count, error in enumerate(schema.validator.iter_errors(args)):
        if count == MAX_ERRORS:
            break
        if not _closed_object(error, args, schema.schema, issues):
            _classify(error, issues, schema.schema)
    issues.extend(_unknown(key, args, schema, tool) for key in unknown)
    issues = _tidy(issues)
    for issue in issues:
        if issue.check == "non_existent_parameter" and issue.keyword == "additionalProperties":
            issue.owner = schema
        issue.capped = capped
    return issues


def _closed_object(error: Any, args: dict[str, Any], root: dict[str, Any], issues: list[_Issue]) -> bool:
    """Report the names of an object whose schema allows none (`additionalProperties: false`
    and no `properties`): the validator reports that as one `falseSchema` error at the object,
    naming neither the key nor the others. True when `error` was one such."""
    if error.kind.name != "falseSchema" or not error.schema_path or error.schema_path[-1] != "additionalProperties":
        return False
    node = _schema_at(root, error.schema_path[:-1])
    if not isinstance(node, dict) or "properties" in node or "patternProperties" in node:
        return False
    at = tuple(error.instance_path)
    value: Any = args
    for part in at:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return False
    if not isinstance(value, dict):
        return False
    for prop, item in value.items():
        issues.append(
            _Issue(
                "non_existent_parameter",
                (*at, prop),
                f'{_path((*at, prop))}: "{prop}" is not allowed here '
                "(additionalProperties is false, and no property is defined). Remove it.",
                expected=[],
                actual=prop,
                keyword="additionalProperties",
                at=at,
                value=item,
            )
        )
    return True


MAX_ERRORS = 1_000
"""Validation errors classified per call; past it the findings say that more were left out, and
no correction is offered. (The validator builds a value's errors all at once; `MAX_EXPANSION`
bounds how many one value can have.)"""


def _defined_at(schema: _Schema, at: tuple[str | int, ...], name: Any) -> bool:
    """Whether the schema defines `name` for the object at instance path `at`, anywhere its
    subschemas apply there (an `additionalProperties: false` sees only its siblings)."""
    if not at:
        if name in schema.defined or schema.open:
            return True
        return schema.name_patterns is not None and schema.name_patterns.is_valid(name)
    document = Document(schema.schema, schema.draft)
    nodes = _subschemas_at(schema, at, document)
    if nodes is None:
        return True  # not found: never remove what cannot be shown undefined
    for node in nodes:
        names = names_at(document, schema.schema, node, schema.draft)
        if names.open or name in names.names:
            return True
        for pattern in names.patterns:
            try:
                if jsonschema_rs.validator_for({"pattern": pattern}, pattern_options=_PATTERN_OPTIONS).is_valid(name):
                    return True
            except ValueError:
                return True
    return False


def _subschemas_at(schema: _Schema, at: tuple[str | int, ...], document: Document) -> list[Any] | None:
    """The subschemas that apply to the value at instance path `at` (the object members'
    `properties`, `patternProperties` and `additionalProperties`, the arrays' items), each
    followed by its in-place references and branches; None when a step cannot be followed."""
    current = [schema.schema]
    for step in at:
        following: list[Any] = []
        for node in _in_place(document, current, schema.draft):
            following.extend(_members(node, step))
        if not following:
            return None
        current = following
    return current


def _in_place(document: Document, nodes: list[Any], draft: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for key in ("$ref", "$dynamicRef", "$recursiveRef"):
            if key in node:
                stack.extend(t for t in document.targets(node, key) or () if isinstance(t, dict))
        for key in ("allOf", "anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                stack.extend(node[key])
        for key in ("if", "then", "else"):
            if key in node:
                stack.append(node[key])
        for key in ("dependentSchemas", "dependencies"):
            if isinstance(node.get(key), dict):
                stack.extend(sub for sub in node[key].values() if isinstance(sub, dict))
    return out


def _members(node: dict[str, Any], step: str | int) -> list[Any]:
    if isinstance(step, int):
        found = []
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list) and step < len(prefix):
            found.append(prefix[step])
        elif isinstance(items, list):
            found.append(items[step] if step < len(items) else node.get("additionalItems"))
        elif items is not None:
            found.append(items)
        return [f for f in found if f is not None]
    found = []
    properties = node.get("properties")
    if isinstance(properties, dict) and step in properties:
        found.append(properties[step])
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        found.extend(patterns.values())  # a superset: only used to find names that are defined
    if "additionalProperties" in node and not (isinstance(properties, dict) and step in properties):
        found.append(node["additionalProperties"])
    return found


class _PatternGaveUp(Exception):
    """The regex engine gave up on a value (`BACKTRACK_LIMIT`): the spec's pattern is at fault."""

    def __init__(self, pattern: Any, at: tuple[str | int, ...], reason: str):
        super().__init__(pattern, at, reason)
        self.pattern = pattern
        self.at = at
        self.reason = reason


_ENGINE_FAILURES = (
    jsonschema_rs.ValidationErrorKind.BacktrackLimitExceeded,
    jsonschema_rs.ValidationErrorKind.RegexEngineFailure,
)


def _raise_if_gave_up(errors: Any, root: Any, key: tuple[str] | None) -> None:
    """Raise `_PatternGaveUp` for the first error (at any depth of union branches) where
    the regex engine gave up. `key`: the errors are about this property name."""
    stack = list(errors)
    while stack:
        error = stack.pop()
        kind = error.kind
        if isinstance(kind, _ENGINE_FAILURES):
            pattern = _schema_at(root, error.schema_path) if key is None else None
            # The backtrack limit names its reason `error`, another engine failure `message`.
            reason = (
                kind.error
                if isinstance(kind, jsonschema_rs.ValidationErrorKind.BacktrackLimitExceeded)
                else kind.message
            )
            raise _PatternGaveUp(pattern, key if key is not None else tuple(error.instance_path), reason)
        if isinstance(kind, _UNION_FAILURES):
            for branch in kind.context:
                stack.extend(branch)


def _tidy(issues: list[_Issue]) -> list[_Issue]:
    """Drop echoes: duplicates, errors at a value already wrong in type, names reported twice."""
    if len(issues) < 2:  # nothing to echo
        return issues
    wrong_type = {i.at for i in issues if i.check == "incorrect_parameter_type"}
    unknown = {i.segments for i in issues if i.check == "non_existent_parameter"}
    seen: set[Any] = set()
    out: list[_Issue] = []
    for issue in issues:
        if (
            issue.check != "incorrect_parameter_type"
            and issue.at in wrong_type
            and issue.check != "non_existent_parameter"
        ):
            continue
        if issue.keyword == "unevaluatedProperties" and issue.segments in unknown:
            continue
        if issue.check == "non_existent_parameter":
            key: Any = (issue.check, issue.segments)
        else:
            key = (issue.check, issue.segments, issue.keyword, _show(issue.expected, 200))
        if key in seen:
            continue
        seen.add(key)
        out.append(issue)
    return out


@lru_cache(maxsize=4096)  # a schema fails at the same few places row after row; bounded
def _keyword(schema_path: tuple[Any, ...], fallback: str) -> str:
    """The last JSON Schema keyword on a schema path (property names are skipped)."""
    keyword = None
    skip = False
    for part in schema_path:
        if skip:
            skip = False
            continue
        if isinstance(part, str):
            keyword = part
            skip = part in (
                "properties",
                "patternProperties",
                "$defs",
                "definitions",
                "dependentSchemas",
                "dependencies",
            )
    return keyword or fallback


_UNION_FAILURES = (jsonschema_rs.ValidationErrorKind.AnyOf, jsonschema_rs.ValidationErrorKind.OneOfNotValid)


def _classify(error: Any, issues: list[_Issue], root: dict[str, Any]) -> None:
    kind = error.kind
    if isinstance(kind, _ENGINE_FAILURES):
        _raise_if_gave_up([error], root, None)
    name = kind.name
    at = tuple(error.instance_path)
    keyword = _keyword(tuple(error.schema_path), name)
    if name == "type":
        types = tuple(kind.types)
        issues.append(_type_issue(at, error.instance, types, keyword))
    elif name == "required":
        prop = kind.property
        hint = _property_hint(root, error.schema_path, prop)
        issues.append(
            _Issue(
                "missing_required_parameter",
                (*at, prop),
                f'{_path((*at, prop))}: required parameter "{prop}" is missing{hint}. Add it.',
                expected=prop,
                actual=None,
                keyword=keyword,
                at=at,
            )
        )
    elif name in ("enum", "const"):
        if name == "enum":
            # The spec's own list when the path leads to it: the same objects error after error,
            # so corrections index them once (`_loose_matches`) instead of converting each copy.
            stated = _schema_at(root, error.schema_path)
            options = _enum_options(stated) if isinstance(stated, list) else tuple(kind.options)
        else:
            options = (kind.expected_value,)
        where = _path(at)
        if name == "enum":
            message = f"{where}: {_show(error.instance)} is not one of the allowed values {_choices(options)}. Use one of them."
            expected: Any = list(options[:MAX_LISTED])
        else:
            message = f"{where}: must be exactly {_show(options[0])}, got {_show(error.instance)}."
            expected = options[0]
        issues.append(
            _Issue(
                "allowed_values_violation",
                at,
                message,
                expected=expected,
                actual=error.instance,
                keyword=keyword,
                at=at,
                value=error.instance,
                options=options,
            )
        )
    elif name == "additionalProperties":
        allowed = _object_names(root, error.schema_path[:-1])
        listing = f"; allowed: {', '.join(allowed)}" if allowed else ""
        for prop in kind.unexpected:
            value = error.instance.get(prop, _MISSING) if isinstance(error.instance, dict) else _MISSING
            issues.append(
                _Issue(
                    "non_existent_parameter",
                    (*at, prop),
                    f'{_path((*at, prop))}: "{prop}" is not allowed here '
                    f"(additionalProperties is false{listing}). Remove it.",
                    expected=allowed[:MAX_LISTED],
                    actual=prop,
                    keyword=keyword,
                    at=at,
                    value=value,
                )
            )
    elif isinstance(kind, _UNION_FAILURES):
        _classify_union(error, issues, root, keyword)
    elif name == "unevaluatedProperties":
        for prop in kind.unexpected:
            issues.append(
                _Issue(
                    "json_schema_violation",
                    (*at, prop),
                    f'{_path((*at, prop))}: "{prop}" is not evaluated by any '
                    "subschema and unevaluatedProperties forbids it. Remove it.",
                    expected=None,
                    actual=prop,
                    keyword=keyword,
                    at=at,
                )
            )
    else:
        issues.append(_violation(error, keyword, root))


_ENUM_OPTIONS = LRU()  # id(enum list) -> (the list, its members as a tuple)


def _enum_options(enum: list[Any]) -> tuple[Any, ...]:
    """`tuple(enum)`, the same tuple for the same list (bounded; the entry keeps the list alive)."""
    hit = _ENUM_OPTIONS.get(id(enum))
    if hit is not None and hit[0] is enum:
        return hit[1]
    options = tuple(enum)
    _ENUM_OPTIONS.put(id(enum), (enum, options))
    return options


_CLAMPED = 2**63 - 1  # jsonschema-rs reads larger limits as 2**64 - 1 (or 2**63 - 1)


def _violation(error: Any, keyword: str, root: dict[str, Any]) -> _Issue:
    at = tuple(error.instance_path)
    kind = error.kind
    if kind.name == "falseSchema":
        expected: Any = False
        detail = "no value is allowed here (the schema is false)"
    else:
        data = kind.as_dict()
        detail = error.message
        if len(data) == 1 and not {"context", "error"} & data.keys():
            expected = next(iter(data.values()))
            if type(expected) is int and expected >= _CLAMPED:
                # The engine clamps limits to 64 bits (minLength: 10**30 reads 2**64 - 1): show the spec's.
                stated = _schema_at(root, error.schema_path)
                if type(stated) is int and stated != expected:
                    detail = detail.replace(str(expected), str(stated))
                    expected = stated
        else:
            expected = _schema_at(root, error.schema_path)
    return _Issue(
        "json_schema_violation",
        at,
        f'{_path(at)}: {detail} (keyword "{keyword}"). Change the value to satisfy the schema.',
        expected=expected,
        actual=error.instance,
        keyword=keyword,
        at=at,
        value=error.instance,
    )


def _type_issue(at: tuple[str | int, ...], value: Any, types: tuple[str, ...], keyword: str) -> _Issue:
    wanted = _either(list(types))
    actual = json_type(value)
    shown = _show(value)
    got = actual if shown == actual else f"{actual} {shown}"  # "got null", not "got null null"
    return _Issue(
        "incorrect_parameter_type",
        at,
        f"{_path(at)}: expected {wanted}, got {got}. Send a value of type {wanted}.",
        expected=types[0] if len(types) == 1 else list(types),
        actual=actual,
        keyword=keyword,
        at=at,
        value=value,
        types=types,
    )


def _classify_union(error: Any, issues: list[_Issue], root: dict[str, Any], keyword: str) -> None:
    at = tuple(error.instance_path)
    branches = error.kind.context
    rejected = [_branch_types(branch, at, error.instance) for branch in branches]
    accepting = [i for i, types in enumerate(rejected) if types is None]
    types = tuple(dict.fromkeys(t for branch in rejected for t in branch or ()))
    if not accepting and types:
        issues.append(_type_issue(at, error.instance, types, keyword))
    elif len(accepting) == 1:
        for sub in branches[accepting[0]]:
            _classify(sub, issues, root)
    else:
        _raise_if_gave_up([sub for branch in branches for sub in branch], root, None)  # not the value's fault
        summary = "; ".join(f"({i + 1}) {branch[0].message}" for i, branch in enumerate(branches) if branch)
        issues.append(
            _Issue(
                "json_schema_violation",
                at,
                f"{_path(at)}: {_show(error.instance)} matches none of the alternatives "
                f'in "{keyword}": {summary}. Change the value to satisfy one of them.',
                expected=_schema_at(root, error.schema_path),
                actual=error.instance,
                keyword=keyword,
                at=at,
                value=error.instance,
            )
        )


def _branch_types(errors: list[Any], at: tuple[Any, ...], value: Any) -> tuple[str, ...] | None:
    """The types a union branch would accept when it rejects `value`'s type outright, else None."""
    for error in errors:
        if tuple(error.instance_path) != at:
            continue
        kind = error.kind
        name = kind.name
        if name == "type":
            return tuple(kind.types)
        if name == "falseSchema":
            return ()
        if name in ("enum", "const"):
            options = kind.options if name == "enum" else [kind.expected_value]
            types = tuple(dict.fromkeys(json_type(o) for o in options))
            if not any(_matches_type(value, t) for t in types):
                return types
        if isinstance(kind, _UNION_FAILURES):
            nested = [_branch_types(branch, at, value) for branch in kind.context]
            if all(types is not None for types in nested):
                return tuple(dict.fromkeys(t for types in nested for t in types or ()))
    return None


def _property_hint(root: dict[str, Any], schema_path: list[Any], prop: str) -> str:
    parent = _schema_at(root, schema_path[:-1])
    if not isinstance(parent, dict) or not isinstance(parent.get("properties"), dict):
        return ""
    sub = parent["properties"].get(prop)
    if isinstance(sub, dict) and isinstance(sub.get("$ref"), str) and sub["$ref"].startswith("#"):
        sub = _resolve_pointer(root, sub["$ref"])
    if isinstance(sub, dict) and isinstance(sub.get("type"), (str, list)):
        types = sub["type"] if isinstance(sub["type"], list) else [sub["type"]]
        return f" (expected {_either([str(t) for t in types])})"
    return ""


def _object_names(root: dict[str, Any], schema_path: list[Any]) -> list[str]:
    node = _schema_at(root, schema_path)
    if isinstance(node, dict) and isinstance(node.get("properties"), dict):
        return list(node["properties"])
    return []
