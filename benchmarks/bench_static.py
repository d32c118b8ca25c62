"""Static-stage throughput end to end from raw JSON rows, against a naive jsonschema baseline.

Each row is one bytes line `{"id", "tools", "call"}`: about 5 tools in one of several spec
formats (OpenAI, bare function, Anthropic, MCP, BFCL type names, parameter lists), drawn
from a fixed number of distinct tool sets, and one call (OpenAI, Anthropic or plain shape).
About half the calls are invalid (wrong type, missing or unknown parameter, enum, range,
format, misspelt function) and a share of rows are malformed (unparseable arguments,
broken specs, no specs, truncated lines).

Timed side by side in one run, over the same rows:
- reflection: the rows read as `reflection check` reads them (`rows.parse_line`, which
  leaves the tool list as JSON text, then `rows.read_row`), then `check_call(row.call,
  row.tools)` (spec normalisation, compiled-validator cache and result objects included);
- baseline: `json.loads(line)`, pick the called tool's schema (BFCL names and parameter
  lists converted), build a `jsonschema.Draft7Validator` for the call and list its errors.

Then peak memory in a fresh process after N and after 4N streamed rows (generated lazily),
for the same corpus and for a stream where every row brings never-seen schemas.

Then end to end on two BFCL-derived corpora with unique ids (benchmarks/_bfcl_corpus.py: real
function docs and calls from the `bfcl-eval` wheel): `--bfcl-rows N` rows of the BFCL corpus
(one spec format per list, about half the calls wrong) and `--mixed-rows N` of the mixed one
(five spec formats in every list, 1-10 tools, a conversation per row, about 84% of the calls
wrong across every static check); default 50,000 each, 0 skips one. On each, side by side in
one run: `reflection check --static-only` as a user runs it (full rows and `--flat`, one worker
process and the default / two), its start-up on an empty file, the Python API's `check_call`
per-call p50/p99 in file order, the same rows through a fresh `jsonschema.Draft7Validator` per
call, and through ALTK's static checker in its own environment (`--altk-python`, see
benchmarks/README.md), with the ratios, then CPU per row by stage for valid and invalid rows
(`_stages.py`; `--no-stages` leaves it out). `--baseline DIR` times the reflection legs of
another checkout too, in the same run, and `--python PATH` those of the reflection installed for
another interpreter (e.g. a venv where `pip install .` built the mypyc-compiled wheel); each set of
legs says which build it ran, compiled or pure Python (whether `reflection.static` is an extension).

    python benchmarks/bench_static.py [--rows 10000] [--tool-sets 40] [--repeat 3] [--bfcl-rows 50000]
                                      [--mixed-rows 50000] [--no-stages] [--baseline DIR] [--python PATH]
                                      [--altk-python PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from reflection.batch._workers import default_workers
from reflection.rows import parse_line, read_row
from reflection.static import _calls_of, _check, _inventory_of, check_call

try:
    from reflection.static import prepare
except ImportError:  # a checkout from before issue 23 (PYTHONPATH naming another checkout)
    from reflection.static import _prepare as prepare

# --- the tool pool ---------------------------------------------------------------------------

_ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "minLength": 1},
        "city": {"type": "string"},
        "postcode": {"type": "string", "pattern": "^[0-9]{5}$"},
    },
    "required": ["street", "city"],
}

POOL: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city"],
        },
    },
    {
        "name": "search_flights",
        "description": "Search flights between two airports.",
        "parameters": {
            "type": "object",
            "properties": {
                "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "date": {"type": "string", "format": "date"},
                "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
                "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"]},
                "nonstop": {"type": "boolean"},
            },
            "required": ["origin", "destination", "date"],
        },
    },
    {
        "name": "create_order",
        "description": "Place an order for items.",
        "parameters": {
            "type": "object",
            "properties": {
                "customer_id": {"type": "string", "format": "uuid"},
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": {"type": "string"},
                            "qty": {"type": "integer", "minimum": 1},
                            "gift": {"type": "boolean"},
                        },
                        "required": ["sku", "qty"],
                    },
                },
                "shipping": {"$ref": "#/$defs/address"},
                "note": {"anyOf": [{"type": "string", "maxLength": 200}, {"type": "null"}]},
            },
            "required": ["customer_id", "items"],
            "$defs": {"address": _ADDRESS},
        },
    },
    {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
                "subject": {"type": "string", "maxLength": 120},
                "body": {"type": "string"},
                "priority": {"type": "string", "enum": ["low", "normal", "high"]},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
    },
    {
        "name": "book_meeting",
        "description": "Book a meeting room.",
        "parameters": {
            "type": "object",
            "properties": {
                "start": {"type": "string", "format": "date-time"},
                "duration_minutes": {"type": "integer", "minimum": 15, "maximum": 480},
                "attendees": {"type": "array", "items": {"type": "string", "format": "email"}},
                "room": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "required": ["start", "duration_minutes"],
        },
    },
    {
        "name": "convert_currency",
        "description": "Convert an amount.",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "exclusiveMinimum": 0},
                "from": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
                "to": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
            },
            "required": ["amount", "from", "to"],
        },
    },
    {
        "name": "lookup_ip",
        "description": "Geolocate an IP address.",
        "parameters": {
            "type": "object",
            "properties": {"ip": {"type": "string", "format": "ipv4"}, "detailed": {"type": "boolean"}},
            "required": ["ip"],
        },
    },
    {
        "name": "update_profile",
        "description": "Update a user profile.",
        "parameters": {
            "type": "object",
            "properties": {
                "user_id": {"type": "integer", "minimum": 1},
                "name": {"type": "string", "minLength": 1, "maxLength": 80},
                "age": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 150}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "address": {"$ref": "#/$defs/address"},
            },
            "required": ["user_id"],
            "$defs": {"address": _ADDRESS},
        },
    },
    {
        "name": "run_query",
        "description": "Run a read-only SQL query.",
        "parameters": {
            "type": "object",
            "properties": {
                "sql": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "timeout_s": {"type": "number", "minimum": 0.1},
            },
            "required": ["sql"],
        },
    },
    {
        "name": "translate",
        "description": "Translate text.",
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "target": {"type": "string", "enum": ["en", "fr", "de", "es", "it", "ja"]},
                "formal": {"type": "boolean"},
            },
            "required": ["text", "target"],
        },
    },
    {
        "name": "set_reminder",
        "description": "Set a reminder.",
        "parameters": {
            "type": "object",
            "properties": {
                "when": {"type": "string", "format": "date-time"},
                "message": {"type": "string", "minLength": 1},
                "repeat": {"type": "string", "enum": ["never", "daily", "weekly"]},
            },
            "required": ["when", "message"],
        },
    },
    {
        "name": "list_files",
        "description": "List files in a folder.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "recursive": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
    },
]

_SAMPLES = {
    "date": ["2025-03-14", "2024-12-01"],
    "date-time": ["2025-03-14T09:30:00Z", "2024-12-01T18:00:00+01:00"],
    "email": ["ana@example.com", "bo@example.org"],
    "uuid": ["6f1c2a9e-8d4b-4c3a-9e2f-1a2b3c4d5e6f"],
    "ipv4": ["192.168.1.20", "8.8.8.8"],
}
_WORDS = ["alpha", "bravo", "Paris", "Lyon", "report", "hello world", "LHR", "q3 numbers"]


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = root
        for part in schema["$ref"][2:].split("/"):
            node = node[part]
        schema = node
    return schema


def _valid(schema: dict[str, Any], rng: random.Random, root: dict[str, Any]) -> Any:
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        return _valid(schema["anyOf"][0] if rng.random() < 0.7 else schema["anyOf"][-1], rng, root)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return {k: _valid(v, rng, root) for k, v in props.items() if k in required or rng.random() < 0.5}
    if kind == "array":
        return [_valid(schema["items"], rng, root) for _ in range(rng.randint(1, 3))]
    if kind == "integer":
        return rng.randint(schema.get("minimum", 1), schema.get("maximum", 50))
    if kind == "number":
        return round(rng.uniform(1, 500), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if "format" in schema:
        return rng.choice(_SAMPLES[schema["format"]])
    if "pattern" in schema:
        return rng.choice(["LHR", "CDG", "JFK"]) if "A-Z" in schema["pattern"] else "75001"
    return rng.choice(_WORDS)


def _mutate(args: dict[str, Any], schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    props = schema.get("properties", {})
    kind = rng.randrange(7)
    args = dict(args)
    if kind == 0 and schema.get("required"):
        args.pop(rng.choice(schema["required"]), None)
    elif kind == 1:
        args["unexpected_" + rng.choice(_WORDS[:3])] = "x"
    elif kind == 2 and args:
        key = rng.choice(sorted(args))
        value = args[key]
        args[key] = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 12345
    elif kind == 3:
        enums = [k for k, v in props.items() if "enum" in v]
        if enums:
            args[rng.choice(enums)] = "NOT_ALLOWED"
    elif kind == 4:
        bounded = [k for k, v in props.items() if "minimum" in v or "maximum" in v]
        if bounded:
            args[rng.choice(bounded)] = 100000
    elif kind == 5:
        formats = [k for k, v in props.items() if v.get("format")]
        if formats:
            args[rng.choice(formats)] = "not a valid value"
    else:
        deep = [k for k, v in args.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
        if deep:
            key = rng.choice(deep)
            args[key] = [dict(args[key][0], qty="two"), *args[key][1:]]
        elif args:
            args[rng.choice(sorted(args))] = {"nested": [1, 2]}
    return args


_BFCL_TYPES = {
    "object": "dict",
    "number": "float",
    "array": "array",
    "string": "string",
    "integer": "integer",
    "boolean": "boolean",
}


def _bfcl(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _bfcl(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = _BFCL_TYPES.get(out["type"], out["type"])
        return out
    if isinstance(schema, list):
        return [_bfcl(v) for v in schema]
    return schema


def _render(tool: dict[str, Any], fmt: str) -> dict[str, Any]:
    name, desc, params = tool["name"], tool["description"], tool["parameters"]
    if fmt == "openai":
        return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}
    if fmt == "anthropic":
        return {"name": name, "description": desc, "input_schema": params}
    if fmt == "mcp":
        return {"name": name, "description": desc, "inputSchema": params}
    if fmt == "bfcl":
        return {"name": name, "description": desc, "parameters": _bfcl(params)}
    if fmt == "parameter_list" and "$defs" not in params:
        required = set(params.get("required", []))
        return {
            "name": name,
            "description": desc,
            "parameters": [dict(sub, name=key, required=key in required) for key, sub in params["properties"].items()],
        }
    return {"name": name, "description": desc, "parameters": params}


_FORMATS = ["openai", "function", "anthropic", "mcp", "bfcl", "parameter_list"]


def _tool_sets(count: int, fresh: bool, index: int) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The tool set a row uses: one of `count` fixed sets, or a never-seen one when `fresh`."""
    rng = random.Random(("set", index if fresh else index % count).__repr__())
    fmt = _FORMATS[(index if fresh else index % count) % len(_FORMATS)]
    tools = rng.sample(POOL, 5)
    if fresh:  # a new property name makes every schema new content
        tools = [
            dict(
                t,
                parameters=dict(
                    t["parameters"],
                    properties=dict(t["parameters"]["properties"], **{f"extra_{index}": {"type": "string"}}),
                ),
            )
            for t in tools
        ]
    return fmt, tools, [_render(t, fmt) for t in tools]


def rows(n: int, tool_sets: int = 40, seed: int = 7, fresh: bool = False) -> Iterator[bytes]:
    """Lazily generate `n` JSON lines: mixed valid, invalid and malformed calls."""
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        _, tools, rendered = _tool_sets(tool_sets, fresh, rng.randrange(1 << 30))
        tool = rng.choice(tools)
        schema = tool["parameters"]
        args = _valid(schema, rng, schema)
        name = tool["name"]
        roll = rng.random()
        if roll < 0.40:
            args = _mutate(args, schema, rng)
        elif roll < 0.45:
            name = name[:-2] + name[-1]  # a typo
        text = json.dumps(args)
        if 0.45 <= roll < 0.50:
            text = rng.choice([text[:-1], text + " junk", '{"amount": NaN}', "[1, 2]", ""])
        shape = rng.randrange(3)
        if shape == 0:
            call: Any = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": text}}
        elif shape == 1 and 0.45 <= roll < 0.50:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": text}
        elif shape == 1:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
        else:
            call = {"name": name, "arguments": args}
        specs: Any = rendered
        if 0.50 <= roll < 0.52:
            specs = []
        elif 0.52 <= roll < 0.55:
            specs = [*rendered, {"description": "a spec without a name"}, {"name": "broken", "parameters": 7}]
        elif 0.55 <= roll < 0.56:
            call = "not a call"
        line = orjson.dumps({"id": i, "tools": specs, "call": call})
        if 0.56 <= roll < 0.57:
            line = line[: len(line) // 2]  # a truncated line
        yield line


# --- the two checkers ------------------------------------------------------------------------


def run_reflection(lines: list[bytes]) -> tuple[int, int]:
    """Check every row with reflection as `reflection check` reads it; returns (valid calls, malformed lines)."""
    valid = broken = 0
    for number, line in enumerate(lines, start=1):
        try:
            row = read_row(parse_line(line), number)
        except ValueError:
            broken += 1
            continue
        result = check_call(row.call, row.tools)
        valid += result.valid
    return valid, broken


def _read_only(lines: list[bytes]) -> tuple[int, int]:
    broken = 0
    for number, line in enumerate(lines, start=1):
        try:
            read_row(parse_line(line), number)
        except ValueError:
            broken += 1
    return 0, broken


_TYPE_NAMES = {
    "dict": "object",
    "float": "number",
    "int": "integer",
    "str": "string",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
}


def _baseline_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _baseline_types(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = _TYPE_NAMES.get(out["type"], out["type"])
        return out
    if isinstance(schema, list):
        return [_baseline_types(v) for v in schema]
    return schema


def _baseline_schema(specs: list[Any], name: Any) -> Any:
    """The called tool's schema, converted only as far as jsonschema needs (no caching)."""
    for spec in specs:
        body = spec["function"] if isinstance(spec.get("function"), dict) else spec
        if body.get("name") != name:
            continue
        params = body.get("parameters", body.get("input_schema", body.get("inputSchema")))
        if isinstance(params, list):
            params = {
                "type": "object",
                "required": [p["name"] for p in params if p.get("required")],
                "properties": {
                    p["name"]: {k: v for k, v in p.items() if k not in ("name", "required")} for p in params
                },
            }
        elif isinstance(params, dict) and params.get("type") == "dict":  # BFCL type names
            params = _baseline_types(params)
        return params
    return None


_FORMAT_CHECKER = jsonschema.Draft7Validator.FORMAT_CHECKER


def _baseline_inputs(line: bytes) -> tuple[Any, Any] | None:
    row = json.loads(line)
    call = row["call"]
    body = call["function"] if isinstance(call.get("function"), dict) else call
    args = body.get("arguments", body.get("input", {}))
    if isinstance(args, str):
        args = json.loads(args) if args.strip() else {}
    schema = _baseline_schema(row["tools"], body.get("name"))
    if schema is None or not isinstance(args, dict):
        return None
    return schema, args


def run_baseline(lines: list[bytes]) -> tuple[int, int]:
    """The naive way: json, a fresh Draft7Validator per call, list all its errors."""
    valid = broken = 0
    for line in lines:
        try:
            inputs = _baseline_inputs(line)
            if inputs is None:
                continue
            schema, args = inputs
            errors = list(jsonschema.Draft7Validator(schema, format_checker=_FORMAT_CHECKER).iter_errors(args))
            valid += not errors
        except Exception:  # noqa: BLE001 - the naive checker has no answer for malformed rows
            broken += 1
    return valid, broken


def _stages(lines: list[bytes], repeat: int) -> tuple[float, float, float]:
    """Rates of reflection's normalisation and checking steps alone, and of the baseline's
    checking step alone (a fresh Draft7Validator per call), on inputs parsed beforehand."""
    parsed = []
    for number, line in enumerate(lines, start=1):
        try:
            parsed.append(read_row(parse_line(line), number))
        except ValueError:
            continue

    def normalise(rows: list[Any]) -> tuple[int, int]:
        for row in rows:
            prepare(_inventory_of(row.tools))
            _calls_of(row.call, "call")
        return 0, 0

    checks = [
        (calls[0], prepare(_inventory_of(row.tools)))
        for row in parsed
        if len(calls := _calls_of(row.call, "call")) == 1
    ]

    def check(pairs: list[Any]) -> tuple[int, int]:
        for call, prepared in pairs:
            _check(call, prepared)
        return 0, 0

    base_inputs = []
    for line in lines:
        try:
            inputs = _baseline_inputs(line)
            if inputs is not None:
                list(jsonschema.Draft7Validator(inputs[0], format_checker=_FORMAT_CHECKER).iter_errors(inputs[1]))
                base_inputs.append(inputs)
        except Exception:  # noqa: BLE001 - rows the naive checker cannot take are left out here
            continue

    def base(pairs: list[Any]) -> tuple[int, int]:
        for schema, args in pairs:
            list(jsonschema.Draft7Validator(schema, format_checker=_FORMAT_CHECKER).iter_errors(args))
        return 0, 0

    return _rate(normalise, parsed, repeat)[0], _rate(check, checks, repeat)[0], _rate(base, base_inputs, repeat)[0]


def _rate(fn: Any, lines: list[Any], repeat: int) -> tuple[float, tuple[int, int]]:
    best = float("inf")
    out: tuple[int, int] = (0, 0)
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        out = fn(lines)
        best = min(best, time.perf_counter() - start)
    return len(lines) / best, out


# --- memory ----------------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    # VmHWM is this process's own high-water mark; ru_maxrss would also count the parent's
    # memory at fork time, which Linux carries over the exec.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_child(n: int, tool_sets: int, fresh: bool) -> None:
    """Stream 4n rows through check_call; print peak traced memory and RSS after n and 4n."""
    tracemalloc.start()
    report = []
    done = 0
    for target in (n, 4 * n):
        for line in rows(target - done, tool_sets, seed=11 + done, fresh=fresh):
            run_reflection([line])
        done = target
        peak = tracemalloc.get_traced_memory()[1]
        report.append({"rows": target, "traced_peak_mb": peak / 2**20, "max_rss_mb": _peak_rss_mb()})
    print(json.dumps(report))


def _memory(n: int, tool_sets: int, fresh: bool) -> list[dict[str, float]]:
    args = [sys.executable, __file__, "--memory-child", str(n), "--tool-sets", str(tool_sets)]
    if fresh:
        args.append("--fresh")
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000, help="rows in the timed corpus (default 10000)")
    parser.add_argument("--tool-sets", type=int, default=40, help="distinct tool sets in the corpus (default 40)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per checker; the best counts")
    parser.add_argument("--memory-rows", type=int, default=None, help="N for the memory run (default --rows)")
    parser.add_argument(
        "--fresh-rows",
        type=int,
        default=5000,
        help="N for the never-seen-schemas memory run (default 5000; the caches fill at 16,384)",
    )
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--bfcl-rows",
        type=int,
        default=50_000,
        help="rows of the BFCL-derived end-to-end corpus (default 50000; 0 skips it)",
    )
    parser.add_argument(
        "--mixed-rows", type=int, default=50_000, help="rows of the mixed end-to-end corpus (default 50000; 0 skips it)"
    )
    parser.add_argument("--no-stages", action="store_true", help="leave out the CPU split by stage")
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="also time the reflection legs with the checkout at DIR (e.g. ../main): before/after in one run",
    )
    parser.add_argument(
        "--python",
        default=None,
        metavar="PATH",
        help="also time the reflection legs with the reflection installed for the Python at PATH "
        "(e.g. a venv where `pip install .` built the compiled wheel): compiled and pure in one run",
    )
    parser.add_argument(
        "--altk-python",
        default=os.environ.get("ALTK_PYTHON"),
        help="python of a venv with agent-lifecycle-toolkit (default: $ALTK_PYTHON)",
    )
    parser.add_argument(
        "--only-bfcl",
        action="store_true",
        help="run only the end-to-end part (the BFCL and mixed corpora, against ALTK)",
    )
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.memory_child is not None:
        _memory_child(options.memory_child, options.tool_sets, options.fresh)
        return

    if not options.only_bfcl:
        _synthetic(options)
    corpora = {name: n for name, n in (("BFCL", options.bfcl_rows), ("mixed", options.mixed_rows)) if n}
    if corpora:
        _end_to_end(
            corpora, options.repeat, options.altk_python, not options.no_stages, options.baseline, options.python
        )


def _synthetic(options: argparse.Namespace) -> None:
    lines = list(rows(options.rows, options.tool_sets))
    size = sum(map(len, lines)) / len(lines)
    print(
        f"corpus: {len(lines)} rows, {options.tool_sets} tool sets x 5 tools, {len(_FORMATS)} spec formats, "
        f"mean row {size:.0f} bytes"
    )
    run_reflection(lines[:200])  # warm the caches once, as a long-running service would be
    ours, (ours_valid, ours_broken) = _rate(run_reflection, lines, options.repeat)
    base, (base_valid, base_broken) = _rate(run_baseline, lines, options.repeat)
    print(
        f"reflection check_call:        {ours:>10,.0f} calls/s  ({ours_valid} valid, {ours_broken} unparseable lines)"
    )
    print(
        f"baseline jsonschema Draft7:   {base:>10,.0f} calls/s  ({base_valid} valid, {base_broken} rows it could not check)"
    )
    print(f"ratio: {ours / base:.1f}x (target >= 8x)")
    floor = _rate(_read_only, lines, options.repeat)[0]
    print(
        f"ceiling: reading the rows alone (reflection.rows.parse_line + read_row) runs {floor:,.0f} rows/s, "
        f"{floor / base:.1f}x the baseline"
    )
    normalise_rate, check_rate, base_check_rate = _stages(lines, options.repeat)
    print(
        f"reflection stages, timed apart (us per row): read {1e6 / floor:.1f}, tools and call normalisation "
        f"{1e6 / normalise_rate:.1f}, checks and corrections {1e6 / check_rate:.1f}; end to end {1e6 / ours:.1f}"
    )
    print(
        f"checking step alone: reflection {check_rate:,.0f} calls/s, jsonschema Draft7 {base_check_rate:,.0f} "
        f"calls/s: {check_rate / base_check_rate:.1f}x"
    )
    if options.skip_memory:
        return
    for fresh, label in ((False, "same corpus"), (True, "never-seen schemas on every row")):
        n = options.fresh_rows if fresh else (options.memory_rows or options.rows)
        report = _memory(n, options.tool_sets, fresh)
        cells = "; ".join(
            f"after {r['rows']:,} rows: traced peak {r['traced_peak_mb']:.1f} MB, max RSS {r['max_rss_mb']:.0f} MB"
            for r in report
        )
        print(f"memory, {label}: {cells}")


# --- end to end on a BFCL-derived corpus, against ALTK -------------------------------------


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, stdout) of one run of `cmd`, run in a scratch
    directory: `python -c` puts the working directory first on the path, before PYTHONPATH, so a
    checkout's own `reflection` would shadow the one a leg asks for (`--baseline`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def _api_percentiles(path: Path) -> tuple[float, float]:
    """check_call per row in file order, caches warmed by one earlier pass: p50, p99 (us)."""
    parsed = [read_row(parse_line(line), n) for n, line in enumerate(path.read_bytes().splitlines(), start=1)]
    for row in parsed:
        check_call(row.call, row.tools)
    timings = []
    clock = time.perf_counter
    for row in parsed:
        t0 = clock()
        check_call(row.call, row.tools)
        timings.append(clock() - t0)
    timings.sort()
    return timings[len(timings) // 2] * 1e6, timings[int(len(timings) * 0.99)] * 1e6


def _write_corpus(rows: Iterator[dict[str, Any]], path: Path, altk_path: Path) -> tuple[int, int]:
    """The corpus as JSON Lines, and the rows ALTK can take in its shape: (rows, ALTK's rows)."""
    import _bfcl_corpus

    n = altk_rows = 0
    with path.open("wb") as ours, altk_path.open("wb") as theirs:
        for row in rows:
            ours.write(orjson.dumps(row) + b"\n")
            n += 1
            converted = _bfcl_corpus.altk_row(row)
            if converted is not None:
                theirs.write(orjson.dumps(converted) + b"\n")
                altk_rows += 1
    return n, altk_rows


def _stage_split(path: Path, env: dict[str, str]) -> dict[str, Any]:
    """`_stages.py` over the corpus in a fresh process (cold caches, as a run starts)."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_stages.py")), str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _corpus_summary(path: Path) -> str:
    """What the corpus holds, as reflection reads it: invalid share, distinct tool lists, tools per row."""
    lines = path.read_bytes().splitlines()
    texts: set[bytes] = set()
    tools = 0
    for number, line in enumerate(lines, start=1):
        row = read_row(parse_line(line), number)
        texts.add(row.tools)
        tools += len(orjson.loads(row.tools)) if row.tools is not None else 0
    return f"{len(texts):,} distinct tool lists, {tools / len(lines):.1f} tools per row"


_ALTK_LEG = "ALTK evaluate_static (in-process loop)"


def _end_to_end(
    corpora: dict[str, int],
    repeat: int,
    altk_python: str | None,
    stages: bool,
    baseline: str | None = None,
    python: str | None = None,
) -> None:
    """`reflection check --static-only` against ALTK on each corpus, legs alternated in one run."""
    import _bfcl_corpus
    from _build import build_of

    work = Path(tempfile.mkdtemp(prefix="bench-static-"))
    empty = work / "empty.jsonl"
    empty.write_bytes(b"")
    makers = {"BFCL": _bfcl_corpus.corpus, "mixed": _bfcl_corpus.mixed_corpus}
    files: dict[str, tuple[Path, Path, int, int]] = {}
    for name, n in corpora.items():
        path, altk_path = work / f"{name}.jsonl", work / f"{name}_altk.jsonl"
        files[name] = (path, altk_path, *_write_corpus(makers[name](n), path, altk_path))
    cli_args = ["-c", "from reflection.cli import app; app()", "check", "--static-only"]
    out = str(work / "out.jsonl")
    workers = default_workers()
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")  # ALTK imports litellm, which would fetch prices
    legs: dict[str, dict[str, tuple[list[str], dict[str, str]]]] = {}
    # --baseline DIR: the same legs with another checkout's reflection first on the path; --python
    # PATH: with that interpreter's installed reflection (no PYTHONPATH to shadow it).
    variants = {"": (sys.executable, env)}
    if baseline:
        variants["baseline: "] = (sys.executable, dict(env, PYTHONPATH=str(Path(baseline).resolve())))
    if python:
        variants["--python: "] = (python, {key: value for key, value in env.items() if key != "PYTHONPATH"})
    for prefix, (leg_python, leg_env) in variants.items():
        build = build_of(leg_python, leg_env, tempfile.gettempdir())
        print(f"build of the {prefix.rstrip(': ') or 'reflection'} legs: {build}")
    for name, (path, altk_path, _, _) in files.items():
        legs[name] = {}
        for prefix, (leg_python, leg_env) in variants.items():
            cli = [leg_python, *cli_args]
            legs[name].update(
                {
                    f"{prefix}reflection check, full rows, --workers 1": (
                        [*cli, "--workers", "1", str(path), "-o", out],
                        leg_env,
                    ),
                    f"{prefix}reflection check, full rows (default: {workers} workers)": (
                        [*cli, str(path), "-o", out],
                        leg_env,
                    ),
                    f"{prefix}reflection check --flat --workers 1": (
                        [*cli, "--flat", "--workers", "1", str(path), "-o", out],
                        leg_env,
                    ),
                    f"{prefix}reflection check --flat --workers 2": (
                        [*cli, "--flat", "--workers", "2", str(path), "-o", out],
                        leg_env,
                    ),
                }
            )
        if altk_python:
            legs[name][_ALTK_LEG] = (
                [
                    altk_python,
                    str(Path(__file__).with_name("_altk_leg.py")),
                    str(altk_path),
                    str(work / "altk_out.jsonl"),
                ],
                env,
            )
    best: dict[str, dict[str, tuple[float, float]]] = {name: {} for name in files}
    altk_stats: dict[str, dict[str, Any]] = {}
    split: dict[str, list[dict[str, Any]]] = {name: [] for name in files}
    for _ in range(repeat):  # alternate the corpora and the legs so a noisy neighbour hits them alike
        for name, (path, _, n, altk_rows) in files.items():
            for label, (cmd, leg_env) in legs[name].items():
                wall, cpu, stdout = _timed(cmd, leg_env)
                if label == _ALTK_LEG:
                    altk_stats[name] = json.loads(stdout.strip().splitlines()[-1])
                    wall = altk_stats[name]["seconds"]  # its own loop: import time left out, in ALTK's favour
                rate = (altk_rows if label == _ALTK_LEG else n) / wall
                if rate > best[name].get(label, (0.0, 0.0))[0]:
                    best[name][label] = (rate, cpu)
            if stages:
                split[name].append(_stage_split(path, env))
    cli = [sys.executable, *cli_args]
    startups = [_timed([*cli, str(empty), "-o", out], env)[:2] for _ in range(repeat)]
    startup, startup_cpu = min(wall for wall, _ in startups), min(cpu for _, cpu in startups)
    print(
        f"\nreflection check --static-only start-up on an empty file: {startup * 1000:.0f} ms, "
        f"{startup_cpu * 1000:.0f} ms CPU (included below)"
    )
    for name, (path, _, n, altk_rows) in files.items():
        title = (
            "BFCL-derived corpus (one spec format per list, about half the calls wrong, the question as history)"
            if name == "BFCL"
            else "mixed corpus (five spec formats in each list, 1-10 tools, a conversation per row, most calls wrong)"
        )
        print(
            f"\n== {title}: {n:,} rows with unique ids ({path.stat().st_size / n:.0f} bytes mean), "
            f"{_corpus_summary(path)}; bfcl-eval {_bfcl_corpus.BFCL_VERSION}; ALTK takes {altk_rows:,} of them "
            "(OpenAI shape, JSON Schema types)"
        )
        _report(best[name], altk_stats.get(name), path, n, altk_rows, startup_cpu)
        if split[name]:
            _print_split(split[name])


def _report(
    best: dict[str, tuple[float, float]],
    altk_stats: dict[str, Any] | None,
    path: Path,
    n: int,
    altk_rows: int,
    startup_cpu: float,
) -> None:
    for label, (rate, cpu) in best.items():
        print(f"{label:<42} {rate:>10,.0f} rows/s  ({1e6 / rate:.1f} us/row wall; child CPU {cpu:.1f} s)")
    p50, p99 = _api_percentiles(path)
    print(f"Python API check_call in file order, warm: p50 {p50:.1f} us, p99 {p99:.1f} us (target p50 <= 25)")
    draft7, _ = _rate(run_baseline, path.read_bytes().splitlines(), 1)
    print(f"jsonschema Draft7Validator per call (same rows, in-process): {draft7:,.0f} rows/s")
    altk = best.get(_ALTK_LEG)
    if altk is None or altk_stats is None:
        print("ALTK: skipped (pass --altk-python or set ALTK_PYTHON; see benchmarks/README.md)")
        return
    print(
        f"ALTK evaluate_static per call in file order: p50 {altk_stats['p50_us']:.1f} us, "
        f"p99 {altk_stats['p99_us']:.1f} us"
    )
    ratios = "; ".join(
        f"{re.sub('reflection check,? ?', '', label)} {rate / altk[0]:.2f}x"
        for label, (rate, _) in best.items()
        if label != _ALTK_LEG
    )
    print(f"ratio vs ALTK: {ratios} (targets: full rows, default >= 1.5x mixed, >= 2x BFCL; --flat, 2 workers >= 2.5x)")
    print(
        f"ratio vs ALTK: Draft7 per call {draft7 / altk[0]:.2f}x; API p99 {p99:.0f} us vs ALTK's "
        f"{altk_stats['p99_us']:.0f} us"
    )
    # CPU hardly moves with a busy neighbour, unlike wall-clock rates: the ratio to trust on a
    # shared machine. reflection's: every process of the leg less the start-up; ALTK's: its loop.
    altk_cpu = altk_stats["cpu_seconds"] / altk_rows * 1e6
    cpu = "; ".join(
        f"{re.sub('reflection check,? ?', '', label)} {(cpu - startup_cpu) / n * 1e6:.0f} us "
        f"({altk_cpu / ((cpu - startup_cpu) / n * 1e6):.2f}x)"
        for label, (_, cpu) in best.items()
        if label != _ALTK_LEG
    )
    print(f"CPU per row, all processes, start-up aside (ratio vs ALTK's {altk_cpu:.0f} us): {cpu}")


def _print_split(runs: list[dict[str, Any]]) -> None:
    """The stage split of `_stages.py`, each stage's lowest over the runs (noise only adds)."""
    import _stages

    print(
        f"CPU per row by stage, one process, cold caches (us; lowest of {len(runs)} run{'s' if len(runs) > 1 else ''}):"
    )
    kinds = ("valid", "invalid")
    rows = {kind: runs[0][kind]["rows"] for kind in kinds}
    print(f"  {'stage':<26}" + "".join(f"{f'{kind} ({rows[kind]:,})':>18}" for kind in kinds))
    totals = dict.fromkeys(kinds, 0.0)
    for stage in _stages.STAGES:
        cells = []
        for kind in kinds:
            value = min(run[kind]["us"][stage] for run in runs)
            totals[kind] += value
            cells.append(f"{value:>18.1f}")
        print(f"  {stage:<26}" + "".join(cells))
    print(f"  {'total':<26}" + "".join(f"{totals[kind]:>18.1f}" for kind in kinds))


if __name__ == "__main__":
    main()
