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
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
_CACHE = Path(__file__).resolve().parent / ".cache"
_CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple",
               "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"]
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None, "integer": "integer",
          "string": "string", "boolean": "boolean", "array": "array", "number": "number", "object": "object"}


def wheel_data() -> Path:
    """The `bfcl_eval/data` directory of the pinned wheel, downloaded once from PyPI."""
    target = _CACHE / f"bfcl_eval-{BFCL_VERSION}"
    data = target / "bfcl_eval" / "data"
    if data.is_dir():
        return data
    _CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(_CACHE),
                    f"bfcl-eval=={BFCL_VERSION}"], check=True)
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
                (name, params), = answer.items()
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
        yield {"id": f"{rid}#{i}", "tools": [_render(f, fmt) for f in functions],
               "history": [{"role": "user", "content": text}], "call": call}


def altk_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """The row as ALTK's static checker takes it, or None when ALTK cannot take it at all."""
    from reflection.formats import normalize_call, normalize_tools

    inventory = normalize_tools(row["tools"])
    call = normalize_call(row["call"])
    if not inventory.tools or call.arguments is None:
        return None
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                               "parameters": t.parameters}} for t in inventory.tools]
    return {"id": row["id"], "tools": tools,
            "call": {"id": "c", "type": "function", "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}}
