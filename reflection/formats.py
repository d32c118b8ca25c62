"""Normalise what agent frameworks produce into the internal model.

Nothing outside this module knows about foreign shapes. Every function here accepts any
JSON value: data that cannot be read becomes a `SpecProblem`, a `ToolCall.error` or a
`History.problems` entry with a message a person can act on. Only objects that are not
JSON-like at all (API misuse) raise `TypeError`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from reflection._calls_struct import CALLS
from reflection._json import (
    FINITE,
    MAX_DEPTH,
    PLAIN,
    SOUND,
    JSONTooDeep,
    array_items,
    canonical_bytes,
    dumps,
    has_non_finite,
    parse_json,
    require_json_like,
    value_problem,
    vouch_json_like,
)
from reflection._lru import LRU
from reflection._own_words import strip_own_words
from reflection._text import printable
from reflection.model import (
    History,
    Message,
    SpecFormat,
    SpecProblem,
    ToolCall,
    ToolInventory,
    ToolSpec,
    trusted,
    trusted_from,
)

__all__ = ["normalize_call", "normalize_calls", "normalize_history", "normalize_tools", "prepare_history"]

# Python and BFCL type names -> JSON Schema. JSON Schema never uses these names itself,
# so the mapping is safe to apply to every spec.
_TYPE_NAMES: dict[str, str | None] = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
    "dict": "object",
    "any": None,  # no type constraint
}
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA = (
    "items",
    "additionalItems",
    "additionalProperties",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP, _ONE, _LIST = 1, 2, 4
_NESTING: dict[str, int] = {
    name: (_MAP if name in _SUBSCHEMA_MAPS else 0)
    | (_ONE if name in _SUBSCHEMA else 0)
    | (_LIST if name in _SUBSCHEMA_LISTS else 0)
    for name in (*_SUBSCHEMA_MAPS, *_SUBSCHEMA, *_SUBSCHEMA_LISTS)
}
"""Keyword -> how its value nests schemas: a map of them, one, or a list ("items": one or a list)."""
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


# --- tool specs --------------------------------------------------------------------------


def normalize_tools(raw: Any) -> ToolInventory:
    """Normalise tool specs in any supported shape into a `ToolInventory`.

    Accepts a list of tools (or one tool): OpenAI `{"type": "function", "function": {...}}`,
    bare functions `{name, description, parameters}`, Anthropic `input_schema`, MCP
    `inputSchema`, BFCL type names (`dict`, `float`, `tuple`, `any`) and the parameter-list
    form `{"name", "parameters": [{"name", "type", "required"}]}`. Also `ToolSpec` objects
    and an existing `ToolInventory`. JSON text (a string or UTF-8 bytes) is parsed first.
    """
    if isinstance(raw, (str, bytes)):  # first: the usual input when reading logged rows
        # JSON text is its own cache key: a log line's tool list is normalised once, not
        # parsed again on every row that repeats it.
        inventory = _TEXT_INVENTORIES.get(raw)
        if inventory is None:
            inventory = _inventory_of_specs(raw) if type(raw) is bytes else None
            if inventory is None:
                inventory = _text_inventory(raw)
            _TEXT_INVENTORIES.put(raw, inventory)
        return inventory
    if isinstance(raw, ToolInventory):
        if _CHECKED.get(id(raw)) is raw:  # one this module made or already checked: no walk per call
            return raw
        inventory = raw if all(map(_plain_text, raw.tools)) else _spec_inventory(raw.tools, raw.problems)
        _CHECKED.put(id(inventory), inventory)
        return inventory
    if isinstance(raw, ToolSpec):
        return _spec_inventory((raw,))
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(t, ToolSpec) for t in raw):
        return _spec_inventory(tuple(raw))
    return _normalize_json(raw, require_json_like(raw, "tools"))


def _text_inventory(raw: str | bytes) -> ToolInventory:
    """The inventory of a tool list's JSON text, read whole."""
    try:
        value = parse_json(raw)
    except JSONTooDeep as exc:
        return ToolInventory(problems=(SpecProblem(index=0, name=None, message=f"tool specs cannot be read: {exc}"),))
    except ValueError as exc:
        return ToolInventory(
            problems=(SpecProblem(index=0, name=None, message=f"tool specs are not valid JSON: {printable(str(exc))}"),)
        )
    return _normalize_json(value, require_json_like(value, "tools"))


def _plain_text(tool: ToolSpec) -> bool:
    return printable(tool.name) is tool.name and printable(tool.description) is tool.description


def _spec_inventory(tools: tuple[ToolSpec, ...], problems: tuple[SpecProblem, ...] = ()) -> ToolInventory:
    """Hand-built `ToolSpec`s as an inventory; one whose name or description has a lone
    surrogate (it could not be written out or sent to a judge) becomes a `SpecProblem`.
    Their parameters are checked where they are compiled."""
    if all(map(_plain_text, tools)):
        return ToolInventory(tools=tools, problems=problems)
    found = list(problems)
    for index, tool in enumerate(tools):
        if not _plain_text(tool):
            name = tool.name if printable(tool.name) is tool.name else None
            found.append(
                SpecProblem(
                    index=index,
                    name=name,
                    message=f"tool spec #{index} cannot be used: a lone "
                    "surrogate in its name or description (not valid Unicode text)",
                )
            )
    return ToolInventory(tools=tuple(filter(_plain_text, tools)), problems=tuple(found))


_INVENTORIES = LRU()  # canonical JSON of a tool list -> its inventory
# Inventories known to be sound, by identity (the value keeps the object alive, so its id stays its
# own): a caller that prepares its tool list once (the MCP proxy, a service's tenant) pays per call
# a look-up, not a walk over every tool.
_CHECKED = LRU(1024)
_TEXT_INVENTORIES = LRU()  # a tool list's JSON text -> its inventory
_SPEC_TEXTS = LRU()  # one tool spec's JSON text -> its ToolSpec (specs that normalise cleanly only)
_SPEC_INVENTORIES = LRU()  # the ids of a list's ToolSpecs -> (those specs, their inventory)


_HOSTED = ToolSpec(name="(hosted)")
"""`_SPEC_TEXTS`' entry for a hosted tool's text (`_hosted_tool`): skipped, not a spec."""


def _inventory_of_specs(text: bytes) -> ToolInventory | None:
    """The inventory of the JSON array `text` built from its specs' own cache, or None when any
    spec is new and cannot be read alone (not JSON, or unsound), or the text is not a non-empty
    array (the whole-list path then reads it and says what is wrong, as it always has).

    Evaluation files offer each row a different list drawn from the same tools, in other
    orders and company: a spec is parsed and normalised once, not once per list it is in.
    Lists of the same spec texts, in the same order, share one inventory (and its compiled
    form), whatever lies between the specs. A spec that does not normalise, or whose name an
    earlier spec has, is reported with its index as the whole-list path reports it, and the
    other specs still come from the cache: reading such a list whole cost about 150 us (on
    bench_static's mixed corpus 1.5% of the rows bring one, 2.3 us a row)."""
    items = array_items(text)
    if not items:
        return None
    tools = []
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        spec = _SPEC_TEXTS.get(item)
        if spec is None:
            try:
                value = parse_json(item)
            except ValueError:
                return None
            # A spec alone is as deep as in its list, less one level: a spec the list path finds
            # too deep is read spec by spec, and one that is sound alone normalises the same.
            shape = require_json_like(value, "tools")
            if not shape & SOUND:
                return None
            if _hosted_tool(value):  # not a spec, as on the whole-list path
                spec = _HOSTED
            else:
                normalized = _normalize_tool(value, index)
                if not isinstance(normalized, ToolSpec):  # its message may name its index: not cached
                    problems.append(normalized)
                    continue
                spec = normalized  # a ToolSpec does not depend on its index
                # Checked once here, not again for each list it is in: its parameters are made of
                # parts of the spec and constants, so the spec's flags, when all set, are theirs.
                vouch_json_like(spec.parameters, shape)
            _SPEC_TEXTS.put(item, spec)
        if spec is _HOSTED:
            continue
        if spec.name in seen:
            problems.append(_defined_twice(spec.name, index))
            continue
        seen.add(spec.name)
        tools.append(spec)
    # Built as validation would build it (the specs are the models themselves, kept as they are).
    if problems:  # rare: no cache of its own (the caller caches the list's text)
        return trusted(ToolInventory, tools=tuple(tools), problems=tuple(problems))
    key = tuple(map(id, tools))  # the specs are kept alive by the entry: their ids stay theirs
    hit = _SPEC_INVENTORIES.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], tools, strict=True)):
        return hit[1]
    inventory = trusted(ToolInventory, tools=tuple(tools), problems=())
    _SPEC_INVENTORIES.put(key, (tools, inventory))
    return inventory


def _defined_twice(name: str, index: int) -> SpecProblem:
    return SpecProblem(
        index=index, name=name, message=f"tool {name!r} is defined more than once; the first definition is used"
    )


def _normalize_json(raw: Any, shape: int) -> ToolInventory:
    # Normalisation is pure, so identical tool lists (the common case in logs) share one result.
    if not shape & SOUND:  # no cache key for what cannot be written out; reported spec by spec
        return _normalize_tools_uncached(raw, sound=False)
    key = canonical_bytes(raw)
    inventory = _INVENTORIES.get(key)
    if inventory is None:
        inventory = _normalize_tools_uncached(raw)
        _INVENTORIES.put(key, inventory)
    return inventory


def _normalize_tools_uncached(raw: Any, *, sound: bool = True) -> ToolInventory:
    if raw is None or raw == [] or raw == {}:
        return ToolInventory(empty=True)
    if isinstance(raw, dict) and isinstance(raw.get("tools"), list):
        raw = raw["tools"]
    items = raw if isinstance(raw, list) else [raw]
    tools: list[ToolSpec] = []
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if _hosted_tool(item):
            continue
        problem = None if sound else value_problem(item)
        spec = _normalize_tool(item, index) if problem is None else _unusable_tool(item, index, problem)
        if isinstance(spec, SpecProblem):
            problems.append(spec)
        elif spec.name in seen:
            problems.append(_defined_twice(spec.name, index))
        else:
            seen.add(spec.name)
            tools.append(spec)
    return ToolInventory(tools=tuple(tools), problems=tuple(problems))


_SCHEMA_KEYS = ("function", "parameters", "input_schema", "inputSchema")


def _hosted_tool(item: Any) -> bool:
    """A tool the provider defines and runs or describes itself, with no schema to check a call
    against: the Responses API's `{"type": "web_search"}`, `file_search`, `custom` (a grammar),
    Anthropic's `{"type": "web_search_20250305", "name": "web_search"}` or `bash_20250124`. Not a
    spec: a call naming one is checked as a call to a tool the specs do not hold."""
    return (
        isinstance(item, dict)
        and isinstance(item.get("type"), str)
        and item["type"] != "function"
        and not any(key in item for key in _SCHEMA_KEYS)
    )


def _unusable_tool(item: Any, index: int, problem: str) -> SpecProblem:
    body = item.get("function") if isinstance(item, dict) and isinstance(item.get("function"), dict) else item
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name.strip() or value_problem(name):
        return SpecProblem(index=index, name=None, message=f"tool spec #{index} cannot be used: {problem}")
    return SpecProblem(index=index, name=name, message=f"tool {name!r}: its spec has {problem}")


def _normalize_tool(item: Any, index: int) -> ToolSpec | SpecProblem:
    if not isinstance(item, dict):
        return SpecProblem(index=index, name=None, message=f"tool spec #{index} must be an object, got {_kind(item)}")
    fmt: SpecFormat
    body = item
    if isinstance(item.get("function"), dict) and item.get("type", "function") == "function":
        fmt, body = "openai", item["function"]
    elif "input_schema" in item:
        fmt = "anthropic"
    elif "inputSchema" in item:
        fmt = "mcp"
    elif isinstance(item.get("parameters"), list):
        fmt = "parameter_list"
    else:
        fmt = "function"
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        return SpecProblem(
            index=index, name=None, message=f'tool spec #{index} has no name (expected a non-empty string under "name")'
        )
    description = body.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        return SpecProblem(
            index=index, name=name, message=f"tool {name!r}: description must be a string, got {_kind(description)}"
        )
    key = {
        "openai": "parameters",
        "function": "parameters",
        "parameter_list": "parameters",
        "anthropic": "input_schema",
        "mcp": "inputSchema",
    }[fmt]
    schema = body.get(key)
    if fmt == "parameter_list" and isinstance(schema, list):  # always a list here: the format is read from it
        result = _parameter_list_schema(schema, name)
        if isinstance(result, str):
            return SpecProblem(index=index, name=name, message=result)
        schema = result
    elif schema is None:
        schema = _EMPTY_PARAMETERS
    elif not isinstance(schema, dict):
        return SpecProblem(
            index=index, name=name, message=f"tool {name!r}: {key} must be a JSON Schema object, got {_kind(schema)}"
        )
    else:
        schema = _map_type_names(schema)
        declared = schema.get("type")
        if declared is not None and declared != "object" and not (isinstance(declared, list) and "object" in declared):
            return SpecProblem(
                index=index,
                name=name,
                message=f'tool {name!r}: {key} must describe an object ("type": "object"), got "type": {declared!r}',
            )
    return ToolSpec(name=name, description=description, parameters=schema, source_format=fmt)


def _parameter_list_schema(params: list[Any], tool: str) -> dict[str, Any] | str:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for i, param in enumerate(params):
        if not isinstance(param, dict) or not isinstance(param.get("name"), str) or not param["name"]:
            return f'tool {tool!r}: parameter #{i} must be an object with a non-empty "name"'
        prop = {k: v for k, v in param.items() if k not in ("name", "required")}
        properties[param["name"]] = _map_type_names(prop)
        if param.get("required") is True:
            required.append(param["name"])
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _map_type_names(schema: Any) -> Any:
    """Copy of `schema` with Python/BFCL type names replaced by JSON Schema ones, at any depth."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    declared = out.get("type")
    if isinstance(declared, str) and declared.lower() in _TYPE_NAMES:
        mapped = _TYPE_NAMES[declared.lower()]
        if mapped is None:
            del out["type"]
        else:
            out["type"] = mapped
    elif isinstance(declared, list):
        mapped_list = [_TYPE_NAMES.get(t.lower(), t) if isinstance(t, str) else t for t in declared]
        if None in mapped_list:
            del out["type"]
        else:
            # Items may be unhashable in a broken spec ("type": [[]]); the compiler reports it.
            out["type"] = [t for i, t in enumerate(mapped_list) if t not in mapped_list[:i]]
    for key, value in schema.items():  # a node's own keys: fewer than the keywords that nest
        kind = _NESTING.get(key)
        if kind is None:
            continue
        if isinstance(value, dict):
            if kind & _MAP:
                out[key] = {k: _map_type_names(v) for k, v in value.items()}
            elif kind & _ONE:
                out[key] = _map_type_names(value)
        elif kind & _LIST and isinstance(value, list):
            out[key] = [_map_type_names(v) for v in value]
    return out


# --- tool calls ----------------------------------------------------------------------------


def normalize_calls(raw: Any) -> list[ToolCall]:
    """Normalise one call or many: a list of calls, an assistant message with `tool_calls`
    (OpenAI) or `tool_use` content blocks (Anthropic), a single call in any supported shape,
    or `ToolCall` objects. JSON text (a string or UTF-8 bytes) is parsed first.
    """
    if isinstance(raw, ToolCall):
        return [checked_call(raw)]
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(c, ToolCall) for c in raw):
        return [checked_call(c) for c in raw]
    return normalize_raw_calls(raw)


def checked_call(call: ToolCall, argument: str = "call") -> ToolCall:
    """A hand-built `ToolCall` (which may hold anything) as the formats would have read it:
    bad data becomes its `error`; objects that are not JSON-like raise TypeError."""
    shape = require_json_like(call.arguments, argument) if call.arguments is not None else FINITE | SOUND
    problem = _call_problem(call, shape)
    if problem is not None:  # what cannot be checked or written out is left out, texts escaped
        return call.model_copy(
            update={
                "name": printable(call.name),
                "id": call.id and printable(call.id),
                "raw_arguments": call.raw_arguments and printable(call.raw_arguments),
                "arguments": None,
                "error": printable(call.error or problem),
            }
        )
    if call.error is None and not call.name.strip():
        return call.model_copy(update={"error": "the tool call has no function name"})
    if call.error is None and not shape & FINITE:
        return call.model_copy(
            update={"arguments": None, "error": "arguments contain NaN or Infinity, which JSON cannot represent"}
        )
    return call


def _call_problem(call: ToolCall, shape: int) -> str | None:
    """Why a hand-built `ToolCall` cannot be checked or written out (see `SOUND`; `shape` is
    what `require_json_like` told of its arguments), else None."""
    if not shape & SOUND:
        return f"arguments cannot be checked: {value_problem(call.arguments)}"
    for text in (call.name, call.id, call.raw_arguments, call.error):
        if text is not None and printable(text) is not text:
            return "the tool call is not valid Unicode text (it has a lone surrogate)"
    return None


def normalize_raw_calls(raw: Any) -> list[ToolCall]:
    """`normalize_calls` for input that is not `ToolCall` objects (the caller has checked)."""
    if isinstance(raw, (str, bytes)):
        try:
            raw = parse_json(raw)
        except JSONTooDeep as exc:
            return [ToolCall(name="", error=f"the tool call cannot be read: {exc}")]
        except ValueError as exc:
            return [ToolCall(name="", error=f"tool call is not valid JSON: {printable(str(exc))}")]
        shape = require_json_like(raw, "call")  # exact types, finite; SOUND tells the depth
    else:
        shape = require_json_like(raw, "call")
    return _normalize_calls(raw, shape)


def _normalize_calls(raw: Any, shape: int) -> list[ToolCall]:
    # `raw` is known to be JSON-like; `shape` holds what `require_json_like` told of it.
    if isinstance(raw, (list, tuple)):
        if not raw:
            return [ToolCall(name="", error="no tool call was given (an empty list)")]
        return [_normalize_call(item, shape) for item in raw]
    if isinstance(raw, dict):
        if isinstance(raw.get("tool_calls"), list) and "function" not in raw:
            return _normalize_calls(raw["tool_calls"], shape)
        if raw.get("role") == "assistant" and isinstance(raw.get("content"), list):
            uses = [b for b in raw["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
            if uses:
                return [_normalize_call(b, shape) for b in uses]
            return [ToolCall(name="", error="the assistant message carries no tool call")]
    return [_normalize_call(raw, shape)]


_ARGUMENT_KEYS = ("arguments", "args", "input_parameters", "input")


def normalize_call(raw: Any) -> ToolCall:
    """Normalise a single call: OpenAI `{"id", "type": "function", "function": {"name", "arguments"}}`
    (arguments as a JSON string or an object), Anthropic `{"type": "tool_use", "id", "name", "input"}`,
    or plain `{"name", "arguments" | "args" | "input_parameters"}`.
    """
    if isinstance(raw, ToolCall):
        return checked_call(raw)
    return _normalize_call(raw, require_json_like(raw, "call"))


def _normalize_call(raw: Any, shape: int) -> ToolCall:
    # `raw` is known to be JSON-like (the caller checked the whole value once).
    if not isinstance(raw, dict):
        return ToolCall(name="", error=f"a tool call must be an object, got {_kind(raw)}")
    # A Responses API `function_call` item is answered by its `call_id` (its `id` names the item).
    call_id = raw.get("call_id") if raw.get("type") == "function_call" else raw.get("id")
    call_id = call_id if isinstance(call_id, str) else None
    body = raw["function"] if isinstance(raw.get("function"), dict) else raw
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCall(
            name="",
            id=call_id and printable(call_id),
            error='the tool call has no function name (expected a non-empty string under "name")',
        )
    if not shape & SOUND:  # text that cannot be written out stays out of the call, escaped
        if call_id is not None:
            call_id = printable(call_id)
        if value_problem(name):
            return ToolCall(
                name=printable(name),
                id=call_id,
                error="the function name is not valid Unicode text (it has a lone surrogate)",
            )
    for key in _ARGUMENT_KEYS:
        if key in body:
            break
    else:
        return _tool_call(shape, {"name": name, "id": call_id, "arguments": {}})
    arguments, raw_text, error = _read_arguments(body[key], shape)
    return _tool_call(
        shape, {"name": name, "id": call_id, "arguments": arguments, "raw_arguments": raw_text, "error": error}
    )


def _tool_call(shape: int, fields: dict[str, Any]) -> ToolCall:
    """`ToolCall(**fields)`. When the call was plain JSON (exact types, see `PLAIN`), the
    values already are what validation returns, so they are stored as they are (the
    arguments shallow-copied, as validation copies them): validation is most of the cost
    of reading a call."""
    if not shape & PLAIN:
        return ToolCall(**fields)
    if fields["arguments"] is not None:
        fields["arguments"] = dict(fields["arguments"])
    return trusted_from(ToolCall, fields)


def _read_arguments(raw_args: Any, shape: int) -> tuple[dict[str, Any] | None, str | None, str | None]:
    raw_text = None
    if isinstance(raw_args, str):
        raw_text = raw_args
        if not raw_args.strip():
            return {}, raw_text, None  # "" means "no arguments" (common for parameterless tools)
        try:
            raw_args = parse_json(raw_args)
        except JSONTooDeep as exc:
            return None, printable(raw_text), f"arguments cannot be checked: {exc}"
        except ValueError as exc:
            return None, printable(raw_text), f"arguments are not valid JSON: {printable(str(exc))}"
        # Text that parse_json accepts holds no NaN, infinity, lone surrogate or over-long
        # integer; only its depth is left to tell, and only text with enough brackets can be deep.
        deep = (
            len(raw_text) > 2 * MAX_DEPTH
            and raw_text.count("[") + raw_text.count("{") > MAX_DEPTH
            and not require_json_like(raw_args, "call") & SOUND
        )
        shape = shape | FINITE | SOUND if not deep else (shape | FINITE) & ~SOUND
    if not isinstance(raw_args, dict):
        return None, raw_text, f"arguments must be a JSON object, got {_kind(raw_args)}"
    if not shape & FINITE and has_non_finite(raw_args):
        return None, raw_text, "arguments contain NaN or Infinity, which JSON cannot represent"
    if not shape & SOUND:
        problem = value_problem(raw_args)
        if problem is not None:
            return None, raw_text, f"arguments cannot be checked: {problem}"
    return raw_args, raw_text, None


def raw_calls(raw: Any) -> list[Any]:
    """The calls in `raw` as they were given, one per `normalize_calls(raw)` entry and in the
    same order (JSON text is parsed first), so each result can be answered in its own shape."""
    if isinstance(raw, ToolCall):
        return [raw]
    if isinstance(raw, (str, bytes)):
        try:
            raw = parse_json(raw)
        except ValueError:
            return [raw]
    if isinstance(raw, (list, tuple)):
        return list(raw) if raw else [raw]
    if isinstance(raw, dict):
        if isinstance(raw.get("tool_calls"), list) and "function" not in raw:
            return raw_calls(raw["tool_calls"])
        if raw.get("role") == "assistant" and isinstance(raw.get("content"), list):
            uses = [b for b in raw["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
            return uses or [raw]
    return [raw]


def express_call(raw: Any, call: ToolCall) -> Any:
    """`call` in the shape `raw` came in: an OpenAI tool call stays one (arguments as a JSON
    string when they came as one), an Anthropic `tool_use` block stays one, a plain call keeps
    its argument key, JSON text stays JSON text and a `ToolCall` stays a `ToolCall`. Fields
    the call does not carry (id, type, extra keys) are kept from `raw`."""
    if isinstance(raw, ToolCall):
        return call
    if isinstance(raw, (str, bytes)):
        try:
            parsed = parse_json(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return dumps(express_call(parsed, call))
        return {"name": call.name, "arguments": call.arguments}
    if not isinstance(raw, dict):
        return {"name": call.name, "arguments": call.arguments}
    arguments: dict[str, Any] = dict(call.arguments or {})
    if isinstance(raw.get("function"), dict):
        function = dict(raw["function"])
        function["name"] = call.name
        function["arguments"] = arguments if isinstance(function.get("arguments"), dict) else dumps(arguments)
        return {**raw, "function": function}
    key = next((k for k in _ARGUMENT_KEYS if k in raw), "input" if raw.get("type") == "tool_use" else "arguments")
    return {**raw, "name": call.name, key: dumps(arguments) if isinstance(raw.get(key), str) else arguments}


# --- what a value holds: one call, several, none, or a conversation -------------------------


def is_parallel(call: Any) -> bool:
    """Several calls in: several results out. A list, or an assistant message carrying
    `tool_calls` (OpenAI) or content blocks (Anthropic `tool_use`)."""
    return isinstance(call, (list, tuple)) or (
        isinstance(call, Mapping)
        and (
            isinstance(call.get("tool_calls"), list)
            or (call.get("role") == "assistant" and isinstance(call.get("content"), list))
        )
    )


def answers_in_text(raw: Any) -> bool:
    """Whether `raw` is an assistant message that carries no tool call: no `tool_calls` (OpenAI),
    no `tool_use` content block (Anthropic). The model answered in text."""
    return (
        isinstance(raw, dict)
        and raw.get("role") == "assistant"
        and not raw.get("tool_calls")
        and not (
            isinstance(raw.get("content"), list)
            and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in raw["content"])
        )
    )


def unwrap_tool_calls(raw: Any) -> Any:
    """The list under `tool_calls` of an object that is not a message (`{"tool_calls": [...]}`),
    else `raw` as it is."""
    if isinstance(raw, dict) and isinstance(raw.get("tool_calls"), list) and "role" not in raw:
        return raw["tool_calls"]
    return raw


def holds_messages(items: Any) -> bool:
    """Whether the list `items` holds chat messages (an object with a `role`): a conversation,
    not a list of calls."""
    return any(isinstance(item, dict) and "role" in item for item in items)


# --- history -------------------------------------------------------------------------------

_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "tool": "tool",
    "function": "tool",
}


def normalize_history(raw: Any) -> History:
    """Normalise a conversation: OpenAI chat messages, Anthropic content blocks (text,
    tool_use, tool_result), Responses API input items (messages, `function_call`,
    `function_call_output`; `reasoning` is skipped), or a bare string (one user message); UTF-8 bytes are JSON text,
    parsed first. Unreadable messages (also ones nesting deeper than `MAX_DEPTH`, or with a
    lone surrogate) are skipped and reported in `History.problems`.
    """
    if isinstance(raw, History):
        if _PREPARED.get(id(raw)) is raw:  # read by `prepare_history`: nothing to walk again
            return raw
        found = [_message_problem(m) for m in raw.messages]
        if not any(found):
            return _without_own_words(raw)
        # Hand-built messages that cannot be checked or sent on are skipped, as read ones are.
        return _without_own_words(
            History(
                messages=tuple(m for m, problem in zip(raw.messages, found, strict=True) if problem is None),
                problems=(
                    *raw.problems,
                    *(f"history message #{i} was skipped: {problem}" for i, problem in enumerate(found) if problem),
                ),
            )
        )
    if isinstance(raw, bytes):  # JSON text (a dataset row's history too deep to parse with the row)
        try:
            raw = parse_json(raw)
        except JSONTooDeep as exc:
            return History(problems=(f"the history was skipped: {exc}",))
        except ValueError as exc:
            return History(problems=(f"the history is not valid JSON and was skipped: {printable(str(exc))}",))
    shape = require_json_like(raw, "history")
    sound = shape & SOUND
    # Messages read from plain JSON (exact types, see PLAIN) hold what validation would return.
    build: Callable[..., Message] = _plain_message if shape & PLAIN else Message
    # The calls in a history whose every part is plain, finite and sound are too: not walked again.
    read_call = _plain_call if shape == PLAIN | FINITE | SOUND else normalize_call
    if raw is None:
        return History()
    if isinstance(raw, str):
        if not sound:
            return History(
                problems=("the history was skipped: it is not valid Unicode text (it has a lone surrogate)",)
            )
        return History(messages=(build(role="user", content=raw),))
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    messages: list[Message] = []
    problems: list[str] = []
    tool_names: dict[str, str] = {}
    for index, item in enumerate(items):
        if isinstance(item, Message):
            messages.append(item)
            continue
        problem = None if sound else value_problem(item)
        if problem is not None:
            problems.append(f"history message #{index} was skipped: {problem}")
            continue
        converted = _read_message(item, index, tool_names, build, read_call)
        if isinstance(converted, str):
            problems.append(converted)
            continue
        for message in converted:
            for call in message.tool_calls:
                if call.id:
                    tool_names[call.id] = call.name
            messages.append(message)
    return _without_own_words(trusted_from(History, {"messages": tuple(messages), "problems": tuple(problems)}))


def prepare_history(raw: Any) -> History:
    """`normalize_history(raw)`, for a caller that reads a conversation before its calls come (the
    gateway, while the model works on the request): passed to the gate, it is taken as it is
    instead of walked again. Held by weak reference only, so a prepared conversation lives no
    longer than its caller keeps it."""
    history = normalize_history(raw)
    _PREPARED[id(history)] = history
    return history


_PREPARED: weakref.WeakValueDictionary[int, History] = weakref.WeakValueDictionary()


def _without_own_words(history: History) -> History:
    """`history` with the gate's own feedback removed from every message and labelled: it is
    never evidence for a value nor conversation for the judge (see `reflection._own_words`)."""
    messages: list[Message] | None = None  # a copy only once something changes (rarely)
    for i, message in enumerate(history.messages):
        stripped = strip_own_words(message.content) if message.content else None
        if stripped is not None:
            if messages is None:
                messages = list(history.messages)
            messages[i] = message.model_copy(update={"content": stripped})
    if messages is None:
        return history
    return history.model_copy(update={"messages": tuple(messages)})


def _plain_message(**fields: Any) -> Message:
    return trusted_from(Message, fields)


def _message_problem(message: Message) -> str | None:
    """Why a hand-built `Message` cannot be checked or sent to a judge, else None."""
    for text in (message.content, message.name, message.tool_call_id):
        if text is not None and printable(text) is not text:
            return "a lone surrogate in its text (not valid Unicode text)"
    for call in message.tool_calls:
        shape = require_json_like(call.arguments, "history") if call.arguments is not None else SOUND
        problem = _call_problem(call, shape)
        if problem is not None:
            return f"its tool call is unusable ({problem})"
    return None


def _plain_call(raw: Any) -> ToolCall:
    """`normalize_call(raw)` for part of a value `require_json_like` found plain, finite and sound."""
    return _normalize_call(raw, PLAIN | FINITE | SOUND)


def _read_message(
    item: Any,
    index: int,
    tool_names: dict[str, str],
    build: Callable[..., Message],
    read_call: Callable[[Any], ToolCall] = normalize_call,
) -> list[Message] | str:
    if isinstance(item, str):
        return [build(role="user", content=item)]
    if not isinstance(item, dict):
        return f"history message #{index} must be an object or a string, got {_kind(item)}; it was skipped"
    if "role" not in item and item.get("type") in _RESPONSES_ITEMS:
        return _responses_item(item, tool_names, build, read_call)
    role = _ROLES.get(str(item.get("role", "")).lower())
    if role is None:
        return f"history message #{index} has an unknown role {item.get('role')!r}; it was skipped"
    content = item.get("content")
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif not isinstance(block, dict):
                continue
            elif block.get("type") in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                calls.append(read_call(block))
            elif block.get("type") == "tool_result":
                use_id = block.get("tool_use_id") if isinstance(block.get("tool_use_id"), str) else None
                results.append(
                    build(
                        role="tool",
                        content=_block_text(block.get("content")),
                        tool_call_id=use_id,
                        name=tool_names.get(use_id or ""),
                    )
                )
    elif content is not None:
        texts.append(str(content) if not isinstance(content, (dict, list)) else _block_text(content))
    if isinstance(item.get("tool_calls"), list):
        calls.extend(read_call(c) for c in item["tool_calls"])
    tool_call_id = item.get("tool_call_id") if isinstance(item.get("tool_call_id"), str) else None
    name = item.get("name") if isinstance(item.get("name"), str) else tool_names.get(tool_call_id or "")
    out: list[Message] = list(results)
    if texts or calls or not results:
        out.append(
            build(
                role=role,
                content="\n".join(texts),
                tool_calls=tuple(calls),
                tool_call_id=tool_call_id if role == "tool" else None,
                name=name if role == "tool" else None,
            )
        )
    return out


_RESPONSES_ITEMS = frozenset({"function_call", "function_call_output", "reasoning"})


def _responses_item(
    item: dict[str, Any],
    tool_names: dict[str, str],
    build: Callable[..., Message],
    read_call: Callable[[Any], ToolCall] = normalize_call,
) -> list[Message]:
    """A Responses API input item that is not a message: a `function_call` (an assistant turn
    with that call), its `function_call_output` (a tool message), or `reasoning` (never read:
    a model's reasoning is not conversation)."""
    if item["type"] == "function_call":
        return [build(role="assistant", content="", tool_calls=(read_call(item),))]
    if item["type"] == "function_call_output":
        call_id = item.get("call_id") if isinstance(item.get("call_id"), str) else None
        return [
            build(
                role="tool",
                content=_block_text(item.get("output")),
                tool_call_id=call_id,
                name=tool_names.get(call_id or ""),
            )
        ]
    return []


def _block_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b["text"]
            if isinstance(b, dict) and isinstance(b.get("text"), str)
            else (b if isinstance(b, str) else canonical_bytes(b).decode())
            for b in content
        ]
        return "\n".join(parts)
    return canonical_bytes(content).decode()


# --- calls in messages, and corrected calls written back (the service's shapes) -------------
# One block, public names: the gateway, the /v1/check route and the gate read calls from
# messages and write corrected calls back through these, so no other module knows the shapes.


def count_calls(call: Any) -> int:
    """How many calls `call` holds, at most, without reading them: a list's items, a message's
    `tool_calls` or `tool_use` blocks; anything else is one call (JSON text too: it is one value)."""
    if isinstance(call, (list, tuple)):
        return len(call)
    if isinstance(call, Mapping):
        if isinstance(call.get("tool_calls"), list):
            return len(call["tool_calls"])
        if call.get("role") == "assistant" and isinstance(call.get("content"), list):
            return sum(1 for block in call["content"] if isinstance(block, Mapping) and block.get("type") == "tool_use")
    return 1


_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


def count_calls_text(text: bytes, member: str | None = None) -> int:
    """`count_calls` of a row's call (`call`, else `tool_calls`), or the length of the top-level
    array `tool_calls` (`member`: LiteLLM's guardrail request), read from the row's JSON text in
    one pass that builds none of the calls: the service refuses a large body holding too many
    before parsing it whole. Never more than the parsed body holds (a duplicate key means its
    last value, as the parser has it); a form it does not follow counts 0 or 1, and the parsed
    body's count then decides. Invalid JSON counts 0: the parse says what is wrong."""

    def first(raw: msgspec.Raw) -> bytes:
        return memoryview(raw)[:1].tobytes()  # a Raw is the value's text, no space around it

    try:
        row = CALLS.decode(text)
        if member is not None:
            return len(row.tool_calls) if isinstance(row.tool_calls, list) else 0
        call = row.call if row.call is not msgspec.UNSET else row.tool_calls
        if isinstance(call, list):
            return len(call)
        if not isinstance(call, dict):
            return 1
        calls, content = call.get("tool_calls"), call.get("content")
        if calls is not None and first(calls) == b"[":
            return len(_ARRAY.decode(calls))
        if content is not None and first(content) == b"[" and bytes(call.get("role", b"")) == b'"assistant"':
            blocks = (_OBJECT.decode(block) for block in _ARRAY.decode(content) if first(block) == b"{")
            return sum(1 for block in blocks if bytes(block.get("type", b"")) == b'"tool_use"')
        return 1
    except msgspec.DecodeError:
        return 0


LEGACY_CALL = "_legacy"
"""The key `message_calls` marks a legacy `function_call` with (it is written back as one)."""


def message_calls(message: Mapping[str, Any]) -> list[Any] | None:
    """The calls a Chat Completions message carries, as written (a legacy `function_call` as one
    more call in the tool-call shape, marked `LEGACY_CALL`), or None when it carries none. Raises
    ValueError when its `tool_calls` is not a list: such calls cannot be read, so never passed."""
    calls = message.get("tool_calls")
    legacy = message.get("function_call")
    if legacy is not None:
        call = {"id": None, "type": "function", "function": legacy, LEGACY_CALL: True}
        calls = [*calls, call] if isinstance(calls, list) else [call]
    if calls is None or calls == []:
        return None
    if not isinstance(calls, list):
        raise ValueError("the message's tool_calls are not a list")
    return calls


RESPONSES_PASSED = frozenset(
    {
        "message",
        "reasoning",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_list_tools",
        "mcp_call",
        "compaction",
    }
)
"""Responses API output items that are not calls to the client's tools: text, reasoning, and what
the provider ran itself. `function_call` items are calls; any other type (a `custom_tool_call`,
`local_shell_call`, `computer_call`, `mcp_approval_request`, or one newer than this list) is a
call that cannot be checked."""

ANTHROPIC_PASSED = frozenset(
    {
        "text",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
        "citations",
    }
)
"""Anthropic content blocks that are not calls to the client's tools: text, thinking, and what the
provider ran itself. `tool_use` blocks are calls; any other type is a block that cannot be checked."""


def output_calls(output: list[Any]) -> tuple[list[Any], list[str], str | None]:
    """A Responses API `output` list read: its `function_call` items as written, the types of the
    items that are neither calls nor `RESPONSES_PASSED` (calls that cannot be checked), and the
    text of its messages (None when there is none)."""
    calls, removed, texts = [], [], []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            calls.append(item)
        elif kind not in RESPONSES_PASSED:
            removed.append(str(kind))
        elif kind == "message":
            texts += [
                part["text"]
                for part in item.get("content") or ()
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str)
            ]
    return calls, removed, "".join(texts) or None


def content_calls(content: list[Any]) -> tuple[list[Any], list[str], str | None]:
    """An Anthropic message's `content` list read: its `tool_use` blocks as written, the types of
    the blocks that are neither calls nor `ANTHROPIC_PASSED` (calls that cannot be checked), and
    its text (None when there is none)."""
    calls, removed, texts = [], [], []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            calls.append(block)
        elif kind not in ANTHROPIC_PASSED:
            removed.append(str(kind))
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return calls, removed, "".join(texts) or None


def openai_corrected_call(corrected: Any, original: Any) -> dict[str, Any]:
    """A corrected call written as the OpenAI tool call `original` was: the original's fields (id,
    type) kept, `function` the correction's name and arguments, the arguments as JSON text."""
    function = corrected.get("function", corrected) if isinstance(corrected, dict) else {}
    arguments = function.get("arguments", {})
    out = dict(original) if isinstance(original, dict) else {"type": "function"}
    out["function"] = {
        "name": function.get("name"),
        "arguments": arguments if isinstance(arguments, str) else dumps(arguments),
    }
    return out


def corrected_call(corrected: Any, original: Any) -> dict[str, Any]:
    """A corrected call already in `original`'s shape (`express_call`: a Responses `function_call`
    item, an Anthropic `tool_use` block) with the original's `id`, `call_id` and `type` kept."""
    out = dict(corrected) if isinstance(corrected, dict) else {}
    for key in ("id", "call_id", "type"):
        if isinstance(original, dict) and key in original:
            out[key] = original[key]
    return out


def call_identity(call: Any) -> bytes:
    """What makes two calls the same call: the tool and its arguments as read (JSON text parsed,
    leniently as the clients' readers parse it; text that is not JSON kept as text), in any of the
    shapes (`function.arguments`, `arguments`, Anthropic's `input`). Equal bytes: the same call."""
    import contextlib
    import json

    function = call.get("function", call) if isinstance(call, dict) else {}
    if not isinstance(function, dict):
        function = {}
    arguments = function.get("arguments", function.get("input"))
    if isinstance(arguments, str):
        try:
            arguments = parse_json(arguments)
        except ValueError:
            with contextlib.suppress(ValueError, RecursionError):
                arguments = json.loads(arguments)
    key = [function.get("name"), arguments]
    try:
        return dumps(key).encode()
    except (TypeError, ValueError, UnicodeEncodeError):
        return json.dumps(key, ensure_ascii=True, separators=(",", ":")).encode()


def mcp_call(params: Mapping[str, Any]) -> dict[str, Any]:
    """The call an MCP `tools/call` request's `params` make, in the plain shape: its `name` (""
    when that is not a string) and its `arguments` (`{}` when absent)."""
    name = params.get("name")
    arguments = params.get("arguments")
    return {"name": name if isinstance(name, str) else "", "arguments": arguments if arguments is not None else {}}


def mcp_corrected_params(
    params: Mapping[str, Any], call: Mapping[str, Any], corrected: Mapping[str, Any]
) -> dict[str, Any]:
    """`tools/call` `params` with the corrected call's name and arguments (those it lacks kept from
    `call`, the plain call `mcp_call` read); every other member (`_meta`, `task`...) kept."""
    return {
        **params,
        "name": corrected.get("name", call["name"]),
        "arguments": corrected.get("arguments", call["arguments"]),
    }
