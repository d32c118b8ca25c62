"""A BFCL-derived corpus for the end-to-end benchmarks: real function docs, real calls.

The Berkeley Function Calling Leaderboard's questions, function docs and possible answers ship in
the `bfcl-eval` wheel on PyPI. `wheel_data()` downloads it once (`pip download`, cached under
`benchmarks/.cache/`), and `corpus()` turns its single-turn categories into rows
`{"id", "tools", "history", "call"}` with unique ids:

- tools: the row's function docs, each tool list rendered in one of four spec formats
  (OpenAI, Anthropic `input_schema`, MCP `inputSchema`, BFCL's own type names);
- call: one ground-truth call (the first acceptable value of each argument), in one of three
  call shapes (OpenAI, Anthropic `tool_use`, plain), about half of them changed the way agents
  get calls wrong (a wrong type, a missing required argument, an unknown argument, a misspelt
  name, a value outside an enum, unparseable arguments);
- history: the row's user question.

Rows are cycled with a counter in the id until `n` rows exist, so the corpus is as large as asked
while its tool lists repeat the way a large evaluation file's do. `altk_row()` gives the same row
as ALTK's static checker takes it (OpenAI tools with JSON Schema types, an OpenAI tool call).

`mixed_corpus()` builds the harder corpus that evaluation sets really look like (issue 26): each
tool list mixes all five spec formats (OpenAI, Anthropic `input_schema`, MCP `inputSchema`, bare
functions with BFCL's type names, parameter lists), one to ten tools (the row's own functions and
distractors from the rest of BFCL), a conversation on every row (a system prompt, the user's
question, often an earlier tool call and its result, in OpenAI or Anthropic messages), and about
85% of the calls wrong in ways that fail every static check, sometimes two at once (see
`_MIXED_FAULTS`). Each BFCL row comes with `variants` distinct tool lists, so the lists repeat,
but thousands of them are distinct.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
_CACHE = Path(__file__).resolve().parent / ".cache"
_CATEGORIES = [
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
]
_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "any": None,
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "number": "number",
    "object": "object",
}


def wheel_data() -> Path:
    """The `bfcl_eval/data` directory of the pinned wheel, downloaded once from PyPI."""
    target = _CACHE / f"bfcl_eval-{BFCL_VERSION}"
    data = target / "bfcl_eval" / "data"
    if data.is_dir():
        return data
    _CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "-d",
            str(_CACHE),
            f"bfcl-eval=={BFCL_VERSION}",
        ],
        check=True,
    )
    wheel = next(_CACHE.glob(f"bfcl_eval-{BFCL_VERSION}-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target, [n for n in zf.namelist() if n.startswith("bfcl_eval/data/")])
    return data


def _json_schema(schema: Any) -> Any:
    """BFCL's type names (`dict`, `float`, `tuple`, `any`) as JSON Schema."""
    if isinstance(schema, list):
        return [_json_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        mapped = _TYPES.get(out["type"], out["type"])
        if mapped is None:
            out.pop("type")
        else:
            out["type"] = mapped
    return out


def _sources(data: Path) -> list[tuple[str, str, list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]]:
    """(id, question, functions, calls) for every single-turn row with an answer."""
    out = []
    for category in _CATEGORIES:
        questions = data / f"BFCL_v4_{category}.json"
        answers = data / "possible_answer" / f"BFCL_v4_{category}.json"
        truth = {r["id"]: r["ground_truth"] for r in map(json.loads, answers.read_text().splitlines())}
        for line in questions.read_text().splitlines():
            row = json.loads(line)
            calls = []
            for answer in truth.get(row["id"], []):
                ((name, params),) = answer.items()
                args = {k: v[0] for k, v in params.items() if v and v[0] != ""}
                calls.append((name, args))
            if calls:
                text = " ".join(m["content"] for turn in row["question"] for m in turn if m["role"] == "user")
                out.append((row["id"], text, row["function"], calls))
    return out


def _render(function: dict[str, Any], fmt: str) -> dict[str, Any]:
    name, desc, params = function["name"], function.get("description", ""), function["parameters"]
    if fmt == "openai":
        return {"type": "function", "function": {"name": name, "description": desc, "parameters": _json_schema(params)}}
    if fmt == "anthropic":
        return {"name": name, "description": desc, "input_schema": _json_schema(params)}
    if fmt == "mcp":
        return {"name": name, "description": desc, "inputSchema": _json_schema(params)}
    return {"name": name, "description": desc, "parameters": params}  # BFCL's own types


def _mutate(name: str, args: dict[str, Any], function: dict[str, Any], rng: random.Random) -> tuple[str, Any]:
    props = function["parameters"].get("properties", {})
    required = function["parameters"].get("required", [])
    kind = rng.randrange(6)
    args = dict(args)
    if kind == 0 and args:  # a wrong type
        key = rng.choice(sorted(args))
        args[key] = str(args[key]) if not isinstance(args[key], str) else {"value": args[key]}
    elif kind == 1 and required:
        args.pop(rng.choice(required), None)
    elif kind == 2:
        args["extra_flag"] = True
    elif kind == 3 and len(name) > 3:
        name = name[:-2] + name[-1]
    elif kind == 4:
        enums = [k for k, v in props.items() if isinstance(v, dict) and v.get("enum")]
        if enums:
            args[rng.choice(enums)] = "not-an-allowed-value"
        else:
            return name, json.dumps(args)[:-1]  # unparseable
    else:
        return name, json.dumps(args)[:-1]
    return name, args


def corpus(n: int, seed: int = 11) -> Iterator[dict[str, Any]]:
    """`n` rows with unique ids, cycling over BFCL's rows with varied formats and changes."""
    sources = _sources(wheel_data())
    for i in range(n):
        rid, text, functions, calls = sources[i % len(sources)]
        rng = random.Random(seed * 1_000_003 + i)
        fmt = ("openai", "anthropic", "mcp", "bfcl")[(i // len(sources) + i) % 4]
        name, args = calls[rng.randrange(len(calls))]
        function = next((f for f in functions if f["name"] == name), functions[0])
        arguments: Any = args
        if rng.random() < 0.5:
            name, arguments = _mutate(name, args, function, rng)
        shape = rng.randrange(3)
        text_args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        if shape == 0:
            call: Any = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": text_args}}
        elif shape == 1:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": arguments}
        else:
            call = {"name": name, "arguments": arguments}
        yield {
            "id": f"{rid}#{i}",
            "tools": [_render(f, fmt) for f in functions],
            "history": [{"role": "user", "content": text}],
            "call": call,
        }


def altk_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """The row as ALTK's static checker takes it, or None when ALTK cannot take it at all."""
    from reflection.formats import normalize_call, normalize_tools

    inventory = normalize_tools(row["tools"])
    call = normalize_call(row["call"])
    if not inventory.tools or call.arguments is None:
        return None
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.parameters},
        }
        for t in inventory.tools
    ]
    return {
        "id": row["id"],
        "tools": tools,
        "call": {
            "id": "c",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        },
    }


# --- the mixed corpus ------------------------------------------------------------------------

MIXED_FORMATS = ("openai", "anthropic", "mcp", "bfcl", "parameter_list")
_MIXED_FAULTS = (
    "wrong_type",
    "missing_required",
    "unknown_parameter",
    "unknown_function",
    "enum",
    "constraint",
    "unparseable",
    "broken_spec",
    "no_specs",
)
"""How mixed-corpus calls go wrong, one per static check: incorrect_parameter_type,
missing_required_parameter, non_existent_parameter, non_existent_function,
allowed_values_violation, json_schema_violation (a negative count where the spec says
`minimum: 0`; counts only, so a call without a count gets a wrong type), invalid_tool_call, invalid_api_spec (the called tool's spec cannot be used),
empty_api_spec. A fault that does not fit the call (no enum to violate) falls back to a wrong type."""
_FAULT_WEIGHTS = (22, 18, 16, 12, 8, 8, 8, 5, 3)
_SYSTEM_PROMPTS = (
    "You are a helpful assistant with access to tools. Call a tool when it helps.",
    "You are an agent. Use the tools provided; ask when a required value is missing.",
    "Answer the user's request. Prefer tools over guessing; never invent identifiers.",
)


def _parameter_list(params: dict[str, Any]) -> list[dict[str, Any]]:
    required = set(params.get("required", []))
    return [
        {"name": key, **(prop if isinstance(prop, dict) else {}), "required": key in required}
        for key, prop in params.get("properties", {}).items()
    ]


_COUNTS = re.compile(r"count|limit|num|quantity|page|size|days|nights|hours|year|age|top|total|people|guests|rooms")


def _is_count(key: str, prop: Any) -> bool:
    return isinstance(prop, dict) and prop.get("type") == "integer" and _COUNTS.search(key.lower()) is not None


def _with_minimum(schema: Any) -> Any:
    """Counts are never negative: integer properties named like counts say so (`minimum: 0`),
    as real APIs do."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return schema
    properties = {k: _with_minimum(v) for k, v in schema["properties"].items()}
    for key, prop in properties.items():
        if _is_count(key, prop) and "minimum" not in prop:
            properties[key] = {**prop, "minimum": 0}
    return {**schema, "properties": properties}


def _render_mixed(function: dict[str, Any], fmt: str, broken: bool = False) -> dict[str, Any]:
    params = _with_minimum(function["parameters"])
    if broken:  # what a hand-edited spec gets wrong: "required" as one name, not a list
        params = {**params, "required": params.get("required", ["x"])[0] if params.get("required") else "x"}
    function = {**function, "parameters": params}
    if fmt == "parameter_list" and not broken:
        return {
            "name": function["name"],
            "description": function.get("description", ""),
            "parameters": _parameter_list(params),
        }
    return _render(function, "bfcl" if fmt == "parameter_list" else fmt)


def _first_answer(value: Any) -> Any:
    """An object argument's members as values: BFCL lists the acceptable alternatives of each
    member too (`{"size": ["large"]}`), which `_sources` leaves as they are."""
    if isinstance(value, dict) and value and all(isinstance(v, list) for v in value.values()):
        return {k: _first_answer(v[0]) for k, v in value.items() if v and v[0] != ""}
    return value


def _mixed_fault(
    fault: str, name: str, args: dict[str, Any], function: dict[str, Any], rng: random.Random
) -> tuple[str, Any]:
    """(name, arguments) of the call with `fault` applied; arguments as text when unparseable."""
    props = function["parameters"].get("properties", {})
    required = [k for k in function["parameters"].get("required", []) if k in args]
    args = dict(args)
    if fault == "missing_required" and required:
        args.pop(rng.choice(required))
    elif fault == "unknown_parameter":
        args[rng.choice(("verbose", "extra_flag", "user_id", "limit_results", "format_output"))] = rng.choice(
            (True, 10, "yes")
        )
    elif fault == "unknown_function" and len(name) > 3:
        name = rng.choice((name[:-2] + name[-1], name + "_v2", name.replace("_", "")))
        if name == function["name"]:
            name += "_tool"
    elif fault == "enum" and (enums := [k for k, v in props.items() if isinstance(v, dict) and v.get("enum")]):
        args[rng.choice(enums)] = rng.choice(("not-an-allowed-value", "other", "Unknown"))
    elif fault == "constraint" and (ints := [k for k, v in props.items() if _is_count(k, v)]):
        args[rng.choice(ints)] = -rng.randrange(1, 100)
    elif fault == "unparseable":
        return name, json.dumps(args)[:-1]
    elif args:  # a wrong type: the usual fault, and where the others do not fit
        key = rng.choice(sorted(args))
        value = args[key]
        args[key] = str(value) if not isinstance(value, str) else rng.choice(({"value": value}, [value], len(value)))
    else:
        args["unexpected"] = "value"
    return name, args


def _history(
    text: str, functions: list[dict[str, Any]], calls: list[tuple[str, dict[str, Any]]], i: int, rng: random.Random
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    if rng.random() < 0.7:
        history.append({"role": "system", "content": rng.choice(_SYSTEM_PROMPTS)})
    anthropic = rng.random() < 0.3
    history.append({"role": "user", "content": [{"type": "text", "text": text}] if anthropic else text})
    if rng.random() < 0.45:  # an earlier turn: the agent called a tool and got its result
        name, args = calls[rng.randrange(len(calls))]
        result = json.dumps({"status": "ok", "result": dict(list(args.items())[:2])})
        if anthropic:
            history.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me look that up."},
                        {"type": "tool_use", "id": f"toolu_h{i}", "name": name, "input": args},
                    ],
                }
            )
            history.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_h{i}", "content": result}]}
            )
        else:
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_h{i}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                }
            )
            history.append({"role": "tool", "tool_call_id": f"call_h{i}", "content": result})
        history.append({"role": "user", "content": "Thanks. Now do the rest, please."})
    return history


def mixed_corpus(n: int, seed: int = 26, invalid: float = 0.85, variants: int = 3) -> Iterator[dict[str, Any]]:
    """`n` rows `{"id", "tools", "history", "call"}` with unique ids (see the module docstring):
    mixed spec formats, tool lists of 1 to 10, a conversation on every row, and about `invalid`
    of the calls wrong (a fifth of those twice)."""
    sources = _sources(wheel_data())
    pool = [f for _, _, functions, _ in sources for f in functions]
    for i in range(n):
        index = i % len(sources)
        rid, text, functions, calls = sources[index]
        variant = (i // len(sources)) % variants
        lists = random.Random(seed * 7_919 + index * 31 + variant)  # the tool list: one per (row, variant)
        size = max(1, min(10, len(functions) + lists.randrange(0, 8)))
        rng = random.Random(seed * 1_000_003 + i)
        name, args = calls[rng.randrange(len(calls))]
        args = {k: _first_answer(v) for k, v in args.items()}
        function = next((f for f in functions if f["name"] == name), functions[0])
        own = [function, *(f for f in functions if f is not function)][:size]
        names = {f["name"] for f in own}
        chosen = (
            own + [f for f in lists.sample(pool, min(len(pool), 3 * size)) if f["name"] not in names][: size - len(own)]
        )
        chosen = [f for f in chosen if f["name"] not in names or f in own]
        lists.shuffle(chosen)
        formats = [lists.choice(MIXED_FORMATS) for _ in chosen]
        faults: list[str] = []
        if rng.random() < invalid:
            faults = rng.choices(_MIXED_FAULTS, _FAULT_WEIGHTS, k=2 if rng.random() < 0.2 else 1)
        arguments: Any = args
        for fault in faults:
            if isinstance(arguments, dict) and fault not in ("broken_spec", "no_specs"):
                name, arguments = _mixed_fault(fault, name, arguments, function, rng)
        tools: list[dict[str, Any]] = (
            []
            if "no_specs" in faults
            else [
                _render_mixed(f, fmt, broken="broken_spec" in faults and f is function)
                for f, fmt in zip(chosen, formats, strict=True)
            ]
        )
        shape = rng.randrange(3)
        text_args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        if shape == 0:
            call: Any = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": text_args}}
        elif shape == 1:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": arguments}
        else:
            call = {"name": name, "arguments": arguments}
        yield {
            "id": f"mixed-{rid}#{i}",
            "tools": tools,
            "history": _history(text, functions, calls, i, rng),
            "call": call,
        }
