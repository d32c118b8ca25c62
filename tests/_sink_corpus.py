"""Generated JSON Lines corpora for the sink-parity test (`tests/test_sinks.py`).

`corpus(n, seed)` returns `n` or more input lines (bytes, newline included) that cover every
shape the readers accept and every outcome the static path can produce: each spec format
(OpenAI, bare function, Anthropic `input_schema`, MCP `inputSchema`, BFCL type names,
parameter lists) and broken specs, each call shape (OpenAI, Anthropic `tool_use`, plain,
JSON text, parallel calls in every container), each history shape (OpenAI, Anthropic blocks,
text, malformed), values that the output writer treats specially (non-ASCII, control
characters, integers beyond 64 bits, floats such as 1e16), nesting around `MAX_DEPTH` and
beyond what the parsers read, and the error rows (not JSON, not an object, no call, bad ids,
duplicate ids, invalid UTF-8, a BOM).

The generator is a seeded `random.Random`: the same `(n, seed)` gives the same bytes. The
first lines go through every row kind once (`KINDS`), so every corpus of at least
`len(KINDS)` lines covers all of them whatever the seed; the rest are drawn at random, most
from the common kinds, as a real log would be.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable
from typing import Any

__all__ = ["KINDS", "MAIN_TOOLS", "corpus", "write_corpus"]

# --- tool specs ------------------------------------------------------------------------------

_PAD = (
    "Returns what the service knows. Données météo, 天気予報, прогноз погоды 🌦️; "
    'quotes "inside", a backslash \\ and a tab\t. '
) * 3  # long descriptions, as real specs have

_CABINS = [
    "economy",
    "premium_economy",
    "business",
    "first",
    "basic",
    "saver",
    "flex",
    "plus",
    "standard",
    "comfort",
    "main",
    "lie_flat",
]  # more than 10 values: the listing is cut

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city. " + _PAD,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
                "date": {"type": "string", "format": "date"},
            },
            "required": ["city"],
        },
    },
}

FLIGHT = {
    "type": "function",
    "function": {
        "name": "book_flight",
        "description": "Book a flight. " + _PAD,
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "passengers": {"type": "array", "minItems": 1, "maxItems": 40, "items": {"$ref": "#/$defs/passenger"}},
                "cabin": {"type": "string", "enum": _CABINS, "default": "economy"},
                "seat": {
                    "anyOf": [{"type": "string", "pattern": "^[0-9]{1,2}[A-F]$"}, {"type": "integer", "minimum": 1}]
                },
                "contact": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {"email": {"type": "string", "format": "email"}},
                            "required": ["email"],
                            "additionalProperties": False,
                        },
                        {
                            "type": "object",
                            "properties": {"phone": {"type": "string"}},
                            "required": ["phone"],
                            "additionalProperties": False,
                        },
                    ]
                },
            },
            "required": ["origin", "destination", "passengers"],
            "$defs": {
                "passenger": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "age": {"type": "integer", "minimum": 0},
                        "email": {"type": "string", "format": "email"},
                    },
                }
            },
        },
    },
}

SEARCH = {
    "name": "search",
    "description": "Search the web (Anthropic input_schema).",
    "input_schema": {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "filters": {
                "type": "object",
                "properties": {
                    "lang": {"enum": ["en", "fr", "de", "ja"]},
                    "after": {"type": "string", "format": "date"},
                },
            },
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
        "required": ["q"],
    },
}

USER = {
    "name": "lookup_user",
    "description": "MCP tool.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "user_id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "verbose": {"type": "boolean", "default": False},
            "account": {"type": "integer", "default": 123456789012345678901234567890},  # beyond 64 bits
        },
        "required": ["user_id"],
    },
}

CALC = {
    "name": "calc",
    "description": "BFCL-style types.",
    "parameters": {
        "type": "dict",
        "properties": {
            "x": {"type": "float", "description": "a number"},
            "pair": {"type": "tuple", "items": {"type": "integer"}},
            "meta": {"type": "any"},
            "flags": {"type": "list", "items": {"type": "bool"}},
        },
        "required": ["x"],
    },
}

ALARM = {
    "name": "set_alarm",
    "description": "Parameter-list form.",
    "parameters": [
        {"name": "time", "type": "str", "required": True, "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
        {"name": "repeat", "type": "bool"},
        {"name": "weekdays", "type": "list", "items": {"type": "str", "enum": ["mon", "tue", "wed", "thu", "fri"]}},
    ],
}

EMAIL = {
    "name": "send_email",
    "description": "Bare function form.",
    "parameters": {
        "type": "object",
        "properties": {
            "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
            "subject": {"type": "string", "maxLength": 40},
            "body": {"type": "string"},
            "priority": {"const": "normal"},
            "cc": {"type": "string"},
            "bcc": {"type": "string"},
        },
        "required": ["to", "subject"],
        "dependentRequired": {"bcc": ["cc"]},
    },
}

STORE = {
    "name": "store",
    "description": "Any JSON value.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}, "data": {}}, "required": ["key"]},
}

BULK = {
    "name": "bulk",
    "description": "Thirty integer fields.",
    "parameters": {
        "type": "object",
        "additionalProperties": False,
        "properties": {f"f{i}": {"type": "integer"} for i in range(30)},
    },
}

PING = {"name": "ping"}  # no parameters at all

MAIN_TOOLS = [WEATHER, FLIGHT, SEARCH, USER, CALC, ALARM, EMAIL, STORE, BULK, PING]
"""The tool list most rows carry (one JSON text, repeated row after row as in real logs)."""

_NAMED_BROKEN = [
    {"name": "bad_type", "parameters": {"type": "string"}},
    {"name": "bad_schema", "parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}},
    {
        "name": "cyclic",
        "parameters": {
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        },
    },
    {"name": "remote", "parameters": {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}},
    {
        "name": "regex",
        "parameters": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|aa)+(?=b)\\1$"}}},
    },
    {"name": "bad_desc", "description": 5, "parameters": {"type": "object"}},
    {"name": "plist_bad", "parameters": [{"type": "str"}]},
    {"name": "get_weather", "parameters": {"type": "object"}},  # defined twice: the first wins
    {"name": "nan_like", "input_schema": ["not", "an", "object"]},
    {"name": "bfcl_bad", "parameters": {"type": "dict", "properties": {"s": {"type": "String"}}}},  # not a known name
]
_UNNAMED_BROKEN = [{"description": "no name", "parameters": {}}, 42, {"name": "   "}]

_BROKEN_CALLS = {  # a call to each named broken tool
    "bad_type": {},
    "bad_schema": {"a": 1},
    "cyclic": {"x": 1},
    "remote": {"x": 2},
    "regex": {"s": "a" * 40 + "c"},
    "bad_desc": {},
    "plist_bad": {},
    "nan_like": {},
    "bfcl_bad": {"s": "x"},
}

# --- values ------------------------------------------------------------------------------------

_CITIES = ["Paris", "Zürich", "São Paulo", "東京", "Москва", "Reykjavík", "New York", "Kraków", "القاهرة", "Lima"]
_WORDS = [
    "flight",
    "weather",
    "ünïcödé",
    "emoji 🚀✈️",
    "naïve café",
    "tab\there",
    "line\nbreak",
    'quote "q"',
    "back\\slash",
    "ctrl \x01\x1f\x7f",
    "sep \u2028\u2029",
    "zero\u200bwidth",
    "bidi \u202e",
    "<b>markup</b>",
    "[red]rich[/red]",
    "\\u0041 literal",
    "semi;colon",
    "NULL",
    "true",
    "5",
]
_BIG_INTS = [2**64, 2**64 + 1, -(2**63) - 1, 10**30, 123456789012345678901234567890, -(10**40), 2**200]
_FLOATS = [1e16, 1.5e-7, -0.0, 1.7976931348623157e308, 5e-324, 0.1, 2.5, -3.25e-10, 1e22, 123456789.125, 3.0]
_EXOTIC_IDS = [
    'id "quoted"',
    "id\\back",
    "id\nnewline",
    "ïd 🚀",
    'x","latency_ms":5,"y',
    '\\"latency_ms\\":7',
    "ctrl\x00\x1f",
    "  ",
    "id#2",
]


def _text(rng: random.Random) -> str:
    return rng.choice(_WORDS) + " " + rng.choice(_CITIES)


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(7)
    if pick == 0:
        return rng.choice(_BIG_INTS)
    if pick == 1:
        return rng.choice(_FLOATS)
    if pick == 2:
        return _text(rng)
    if pick == 3:
        return rng.choice([True, False, None])
    if pick == 4:
        return rng.randrange(-(10**6), 10**6)
    if pick == 5:
        return rng.choice([2**63 - 1, 2**64 - 1, -(2**63), 10**18])  # still 64-bit: orjson writes these
    return rng.choice(_CITIES)


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of any shape, with the special values sprinkled in."""
    if depth > 3 or rng.random() < 0.4:
        return _scalar(rng)
    if rng.random() < 0.5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice(["a", "b", "ключ", 'k"q', "latency_ms", "🔑", "x y"]) + str(i): _value(rng, depth + 1)
        for i in range(rng.randrange(4))
    }


_DEEP = re.compile(r'"@@deep:(\d+)@@"')


def _nested(depth: int) -> Any:
    """A value nesting `depth` containers. Beyond what `json.dumps` can write (its recursion),
    a placeholder that `_encode` replaces with the JSON text."""
    if depth > 200:
        return f"@@deep:{depth}@@"
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"n": value}
    return value


# --- calls ---------------------------------------------------------------------------------------


def _shape_call(rng: random.Random, name: Any, arguments: Any, call_id: Any = None, *, text_ok: bool = True) -> Any:
    """A call in one of the shapes the formats read."""
    cid = call_id if call_id is not None else f"call_{rng.randrange(10**6)}"
    pick = rng.randrange(7 if text_ok else 6)
    if pick == 0:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    if pick == 1:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
    if pick == 2:
        return {"type": "tool_use", "id": cid, "name": name, "input": arguments}
    if pick == 3:
        return {"name": name, "arguments": arguments}
    if pick == 4:
        return {"name": name, "args": arguments, "id": cid}
    if pick == 5:
        return {"name": name, "input_parameters": arguments}
    return json.dumps({"name": name, "arguments": arguments})  # a JSON string of a call


def _weather_args(rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {"city": rng.choice(_CITIES)}
    if rng.random() < 0.6:
        args["unit"] = rng.choice(["c", "f"])
    if rng.random() < 0.6:
        args["days"] = rng.randint(1, 14)
    if rng.random() < 0.3:
        args["date"] = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return args


def _flight_args(rng: random.Random, passengers: int = 2) -> dict[str, Any]:
    args: dict[str, Any] = {
        "origin": rng.choice(["CDG", "ZRH", "GRU", "HND"]),
        "destination": rng.choice(["JFK", "LIM", "SVO", "KRK"]),
        "passengers": [
            {"name": rng.choice(["Ana", "Bo", "Zoë", "李雷"]), "age": rng.randint(1, 90)} for _ in range(passengers)
        ],
    }
    if rng.random() < 0.5:
        args["cabin"] = rng.choice(_CABINS)
    if rng.random() < 0.3:
        args["seat"] = rng.choice(["12A", 7])
    if rng.random() < 0.3:
        args["contact"] = rng.choice([{"email": "ana@example.com"}, {"phone": "+41 44 000 00 00"}])
    return args


def _valid_call(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A call that passes every static check (name, arguments)."""
    pick = rng.randrange(9)
    if pick == 0:
        return "book_flight", _flight_args(rng)
    if pick == 1:
        return "search", {"q": _text(rng), "limit": rng.randint(1, 50), "filters": {"lang": "fr"}, "tags": ["a", "b"]}
    if pick == 2:
        return "lookup_user", {
            "user_id": "123e4567-e89b-12d3-a456-426614174000",
            "ip": "10.0.0.1",
            "account": rng.choice([123456789012345678901234567890, 10**25, 5]),
        }
    if pick == 3:
        return "calc", {"x": rng.choice(_FLOATS), "pair": [1, 2], "meta": _value(rng), "flags": [True, False]}
    if pick == 4:
        return "set_alarm", {"time": "07:30", "repeat": True, "weekdays": ["mon", "fri"]}
    if pick == 5:
        return "send_email", {"to": ["bo@example.org"], "subject": _text(rng)[:40], "priority": "normal"}
    if pick == 6:
        return "store", {"key": _text(rng), "data": _value(rng)}
    if pick == 7:
        return "ping", {}
    return "get_weather", _weather_args(rng)


def _failing_call(rng: random.Random, check: str) -> tuple[str, dict[str, Any]]:
    """A call to a main tool that fails `check` (often with a machine correction)."""
    if check == "non_existent_function":
        return rng.choice(
            ["get_wether", "book_fligth", "serch", "lookup_usr", "totally_unknown", "Get_Weather"]
        ), _weather_args(rng)
    if check == "non_existent_parameter":
        args = _weather_args(rng)
        args[rng.choice(["citty", "units", "extra", "ключ"])] = rng.choice(["x", 1, None, 2**70])
        return "get_weather", args
    if check == "incorrect_parameter_type":
        pick = rng.randrange(4)
        if pick == 0:
            return "get_weather", {"city": rng.choice(_CITIES), "days": rng.choice(["5", "12", "five", 2.5, True])}
        if pick == 1:
            return "book_flight", {**_flight_args(rng), "seat": rng.choice([1.5, [1], {"row": 1}])}
        if pick == 2:
            return "calc", {"x": rng.choice(["2.5", "1e16", "x", None]), "pair": ["1", 2]}
        return "set_alarm", {"time": "07:30", "repeat": rng.choice(["true", 1, "yes"])}
    if check == "missing_required_parameter":
        pick = rng.randrange(3)
        if pick == 0:
            return "get_weather", {"unit": "c"}
        if pick == 1:
            return "book_flight", {"origin": "CDG", "passengers": [{"age": 3}]}
        return "send_email", {"body": "hi", "bcc": "x@example.com", "to": ["a@example.com"], "subject": "s"}
    if check == "allowed_values_violation":
        pick = rng.randrange(4)
        if pick == 0:
            return "get_weather", {"city": "Paris", "unit": rng.choice(["C", " F ", "kelvin", 1])}
        if pick == 1:
            return "book_flight", {**_flight_args(rng), "cabin": rng.choice(["ECONOMY", "coach", "First "])}
        if pick == 2:
            return "send_email", {"to": ["a@example.com"], "subject": "s", "priority": rng.choice(["high", "Normal"])}
        return "search", {"q": "x", "filters": {"lang": rng.choice(["EN", "es", 3])}}
    if check == "json_schema_violation":
        pick = rng.randrange(6)
        if pick == 0:
            return "get_weather", {"city": "", "days": rng.choice([0, 40, 10**30])}
        if pick == 1:
            return "get_weather", {"city": "Oslo", "date": rng.choice(["2025-13-45", "tomorrow", "2025/01/01"])}
        if pick == 2:
            return "book_flight", {**_flight_args(rng), "origin": rng.choice(["paris", "CDGX", "cdg"])}
        if pick == 3:
            return "book_flight", {**_flight_args(rng), "contact": {"email": "a@b.c", "phone": "1"}}
        if pick == 4:
            return "lookup_user", {"user_id": rng.choice(["not-a-uuid", "123"]), "ip": rng.choice(["999.1.1.1", "::1"])}
        return "send_email", {"to": [], "subject": "x" * 60, "priority": "normal"}
    raise ValueError(check)


def _many_findings(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """More than 20 findings in one check (the check lists 20 and counts the rest)."""
    if rng.random() < 0.5:
        return "bulk", {f"f{i}": str(i) for i in range(30)} | {f"extra{i}": i for i in range(25)}
    args = _flight_args(rng, passengers=30)
    for passenger in args["passengers"]:
        passenger["age"] = str(passenger["age"])
        passenger["seat"] = "1A"
    return "book_flight", args


def _several_failing(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """Wrong type, missing required, unknown name and a bad enum value in one call."""
    return "book_flight", {
        "origin": 123,
        "passengers": [{"name": "Ana", "age": "7"}],
        "cabin": "Economy",
        "wifi": True,
        "seat": "99Z",
    }


# --- histories -----------------------------------------------------------------------------------


def _leaf_texts(arguments: Any) -> list[str]:
    out: list[str] = []
    stack = [arguments]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, bool) or node is None:
            out.append(json.dumps(node))
        else:
            out.append(str(node))
    return out


def _history(rng: random.Random, arguments: Any, name: str) -> Any:
    """A conversation in which some of the call's values appear (user text, tool output, system
    prompt, assistant text) and others do not, in one of the shapes the formats read."""
    leaves = _leaf_texts(arguments) or ["nothing"]
    mention = lambda: rng.choice(leaves)  # noqa: E731
    pick = rng.randrange(10)
    if pick == 0:
        return None
    if pick == 1:  # a bare string: one user message
        return f"Please use {mention()} for this."
    if pick == 2:  # OpenAI messages with a tool round trip
        cid = f"call_{rng.randrange(1000)}"
        return [
            {"role": "system", "content": f"You are helpful. Default region: {mention()}."},
            {"role": "user", "content": f"I need {name} with {mention()} and {mention()}, thanks!"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "search", "arguments": json.dumps({"q": mention()})},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": cid,
                "content": json.dumps({"result": mention(), "n": rng.choice(_BIG_INTS)}),
            },
            {"role": "assistant", "content": f"Found {mention()}."},
            {"role": "user", "content": rng.choice(_WORDS)},
        ]
    if pick == 3:  # Anthropic content blocks
        uid = f"toolu_{rng.randrange(1000)}"
        return [
            {"role": "user", "content": [{"type": "text", "text": f"Book it for {mention()}."}, "plain string part"]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": uid, "name": "search", "input": {"q": mention()}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": uid,
                        "content": [{"type": "text", "text": f"result: {mention()}"}, {"json": [1, 2]}],
                    }
                ],
            },
            {"role": "human", "content": [{"type": "input_text", "text": mention()}]},
            {"role": "ai", "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "developer", "content": mention()},
            {"role": "function", "name": "calc", "content": {"value": mention()}},
        ]
    if pick == 4:  # malformed messages: history warnings
        return [
            42,
            {"role": "robot", "content": "beep"},
            {"content": "no role"},
            None,
            ["nested"],
            {"role": "user", "content": f"still here: {mention()}"},
            "a bare string message",
        ]
    if pick == 5:  # not a list
        return rng.choice([{"role": "user", "content": f"one message {mention()}"}, 7, True, {"unexpected": "shape"}])
    if pick == 6:  # a long conversation, the value in tool output only
        messages: list[Any] = [{"role": "user", "content": f"turn {i} {rng.choice(_WORDS)}"} for i in range(12)]
        messages.append({"role": "tool", "content": f"…{mention()}…", "tool_call_id": "x"})
        return messages
    if pick == 7:  # values appear nowhere
        return [{"role": "user", "content": "Do the thing."}, {"role": "assistant", "content": "Which thing?"}]
    if pick == 8:  # a message nesting too deep (skipped, with a warning), and one usable one
        return [{"role": "user", "content": mention()}, {"role": "tool", "content": _nested(120)}]
    return [
        {"role": "system", "content": "sys " + mention()},
        {"role": "user", "content": mention().upper()},
        {"role": "assistant", "content": [{"type": "text", "text": mention()}]},
    ]


# --- rows --------------------------------------------------------------------------------------

Row = Callable[[random.Random, int], Any]
"""A row kind: (rng, index) -> a row (dict), or the line's bytes for rows that are not JSON."""


def _row(
    rng: random.Random,
    i: int,
    name: str,
    arguments: Any,
    *,
    tools: Any = MAIN_TOOLS,
    history: Any = None,
    text_ok: bool = True,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"r{i}",
        "tools": tools,
        "history": history if history is not None else _history(rng, arguments, name),
        "call": _shape_call(rng, name, arguments, text_ok=text_ok),
    }
    if rng.random() < 0.1:
        row = {"call": row.pop("call"), **row}  # key order does not matter
    return row


def _k_valid(rng: random.Random, i: int) -> Any:
    return _row(rng, i, *_valid_call(rng))


def _check_kind(check: str) -> Row:
    def kind(rng: random.Random, i: int) -> Any:
        return _row(rng, i, *_failing_call(rng, check))

    kind.__name__ = f"_k_{check}"
    return kind


def _k_many_findings(rng: random.Random, i: int) -> Any:
    return _row(rng, i, *_many_findings(rng))


def _k_several_failing(rng: random.Random, i: int) -> Any:
    return _row(rng, i, *_several_failing(rng))


def _k_empty_spec(rng: random.Random, i: int) -> Any:
    row = _row(rng, i, *_valid_call(rng))
    choice = rng.randrange(5)
    if choice == 0:
        del row["tools"]
    else:
        row["tools"] = [None, [], {}, ""][choice - 1]
    return row


def _k_broken_named(rng: random.Random, i: int) -> Any:
    tools = MAIN_TOOLS + _NAMED_BROKEN
    if rng.random() < 0.5:
        name = rng.choice(sorted(_BROKEN_CALLS))
        return _row(rng, i, name, _BROKEN_CALLS[name], tools=tools)
    # a call to a good tool: the broken ones become warnings
    return _row(rng, i, *rng.choice([_valid_call(rng), _failing_call(rng, "non_existent_function")]), tools=tools)


def _k_broken_unnamed(rng: random.Random, i: int) -> Any:
    tools = _UNNAMED_BROKEN + MAIN_TOOLS
    return _row(rng, i, *rng.choice([_valid_call(rng), _failing_call(rng, "non_existent_function")]), tools=tools)


def _k_tool_shapes(rng: random.Random, i: int) -> Any:
    """The same tools in other containers: JSON text, a {"tools": [...]} wrapper, one tool
    alone, another key order, too deep to parse, a subset, big integers in a spec."""
    name, arguments = _valid_call(rng)
    pick = rng.randrange(8)
    if pick == 0:
        tools: Any = json.dumps(MAIN_TOOLS)
    elif pick == 1:
        tools = {"tools": MAIN_TOOLS}
    elif pick == 2:
        name, arguments = "get_weather", _weather_args(rng)
        tools = WEATHER
    elif pick == 3:
        tools = list(reversed(MAIN_TOOLS))
    elif pick == 4:
        tools = [{"name": "deep", "parameters": _nested(1200)}]
    elif pick == 5:
        tools = [{"name": "deep", "parameters": {"type": "object", "properties": {"x": _nested(150)}}}] + MAIN_TOOLS
    elif pick == 6:
        tools = rng.sample(MAIN_TOOLS, 4)
    else:
        spec = copy.deepcopy(WEATHER)
        spec["function"]["parameters"]["properties"]["days"]["maximum"] = 10**30
        spec["function"]["parameters"]["properties"]["days"]["default"] = 2**65
        name, arguments = "get_weather", {"city": "Lima", "days": rng.choice([2**65, 10**31])}
        tools = [spec]
    return _row(rng, i, name, arguments, tools=tools)


def _k_call_errors(rng: random.Random, i: int) -> Any:
    """Calls that cannot be read: invalid_tool_call."""
    pick = rng.randrange(12)
    bad: Any
    if pick == 0:
        bad = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}
    elif pick == 1:
        bad = {"name": "get_weather", "arguments": "[1, 2]"}
    elif pick == 2:
        bad = {"name": "get_weather", "arguments": rng.choice([[1], 5, "null", True])}
    elif pick == 3:
        bad = {"name": rng.choice(["", "   ", None, 5]), "arguments": {"city": "Oslo"}}
    elif pick == 4:
        bad = {"arguments": {"city": "Oslo"}}
    elif pick == 5:
        bad = rng.choice([42, "not json at all {", None, True, "[]"])
    elif pick == 6:
        bad = {"name": "get_weather", "arguments": '{"city": "Oslo", "n": 1e400}'}  # a float out of range
    elif pick == 7:
        bad = {"name": "get_weather", "arguments": '{"city": "\\ud800"}'}  # a lone surrogate escape
    elif pick == 8:
        bad = {"name": "store", "arguments": {"key": "k", "data": _nested(150)}}  # deeper than MAX_DEPTH
    elif pick == 9:
        bad = {"name": "store", "arguments": json.dumps({"key": "k", "data": _nested(110)})}
    elif pick == 10:
        bad = {"name": "store", "arguments": {"key": "k", "data": _nested(1500)}}  # deeper than the parsers go
    else:
        bad = {"name": "store", "arguments": "   "}  # blank: no arguments (fails `required`)
    row = {"id": f"r{i}", "tools": MAIN_TOOLS, "history": _history(rng, {"city": "Oslo"}, "get_weather"), "call": bad}
    return row


def _k_deep_ok(rng: random.Random, i: int) -> Any:
    """Arguments nesting close to `MAX_DEPTH`, still checked."""
    return _row(rng, i, "store", {"key": "deep", "data": _nested(rng.choice([90, 97, 98]))})


def _k_special_values(rng: random.Random, i: int) -> Any:
    """Integers beyond 64 bits next to floats and text the writers treat differently."""
    data = {
        "big": rng.choice(_BIG_INTS),
        "floats": rng.sample(_FLOATS, 4),
        "text": rng.sample(_WORDS, 4),
        "mixed": _value(rng),
    }
    return _row(
        rng,
        i,
        rng.choice(["store", "calc"]) if rng.random() < 0.2 else "store",
        {"key": rng.choice(_WORDS), "data": data},
    )


def _k_parallel(rng: random.Random, i: int) -> Any:
    """Several calls: a list, a "tool_calls" field, an assistant message (OpenAI or Anthropic)."""
    calls = []
    for _ in range(rng.randint(2, 4)):
        name, arguments = (
            _valid_call(rng)
            if rng.random() < 0.5
            else _failing_call(
                rng, rng.choice(["incorrect_parameter_type", "non_existent_function", "allowed_values_violation"])
            )
        )
        calls.append((name, arguments))
    history = _history(rng, calls[0][1], calls[0][0])
    row: dict[str, Any] = {"id": f"r{i}", "tools": MAIN_TOOLS, "history": history}
    pick = rng.randrange(6)
    if pick == 0:
        row["call"] = [_shape_call(rng, n, a, text_ok=False) for n, a in calls]
    elif pick == 1:
        row["tool_calls"] = [_shape_call(rng, n, a, text_ok=False) for n, a in calls]
    elif pick == 2:
        row["call"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{j}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for j, (n, a) in enumerate(calls)
            ],
        }
    elif pick == 3:
        row["call"] = {
            "role": "assistant",
            "content": [{"type": "text", "text": "calling"}]
            + [{"type": "tool_use", "id": f"tu{j}", "name": n, "input": a} for j, (n, a) in enumerate(calls)],
        }
    elif pick == 4:
        row["call"] = {"tool_calls": [_shape_call(rng, n, a, text_ok=False) for n, a in calls]}
    else:  # parallel calls with a broken one among them, and as JSON text of a list
        row["call"] = json.dumps([{"name": n, "arguments": a} for n, a in calls] + [{"name": "", "arguments": 1}])
    return row


def _k_parallel_odd(rng: random.Random, i: int) -> Any:
    """Parallel containers with nothing usable in them."""
    row: dict[str, Any] = {"id": f"r{i}", "tools": MAIN_TOOLS}
    pick = rng.randrange(4)
    if pick == 0:
        row["call"] = []
    elif pick == 1:
        row["tool_calls"] = []
    elif pick == 2:
        row["call"] = {"role": "assistant", "content": [{"type": "text", "text": "no call here"}]}
    else:
        row["tool_calls"] = [_nested(1200)]  # too deep to parse
    return row


def _k_exotic_id(rng: random.Random, i: int) -> Any:
    """Ids of every type: text with quotes, escapes and control characters, numbers (big ones
    too), booleans, null, objects and lists (named by line), missing."""
    row = _row(rng, i, *_valid_call(rng))
    pick = rng.randrange(9)
    if pick == 0:
        row["id"] = rng.choice(_EXOTIC_IDS) + str(i)
    elif pick == 1:
        row["id"] = rng.choice([i, 10**30 + i, -i, i + 0.5, 1e16])
    elif pick == 2:
        row["id"] = rng.choice([True, False])
    elif pick == 3:
        row["id"] = None
    elif pick == 4:
        row["id"] = rng.choice([{"nested": i}, [i]])
    elif pick == 5:
        del row["id"]
    elif pick == 6:
        row["id"] = f"line-{i + 1}"  # the name a row without an id gets
    elif pick == 7:
        row["id"] = rng.choice(_EXOTIC_IDS)  # repeated across rows: duplicates
    else:
        row["id"] = ""
    return row


def _k_latency_id(rng: random.Random, i: int) -> Any:
    """An id holding the text of an output key (`"latency_ms":`), quoted and escaped."""
    row = _row(rng, i, *_valid_call(rng))
    row["id"] = rng.choice(['x","latency_ms":5,"y', '\\"latency_ms\\":7', '{"latency_ms": 1}']) + str(i)
    return row


def _k_duplicate(rng: random.Random, i: int) -> Any:
    """An id an earlier row has, or that looks like a renamed duplicate."""
    row = _row(rng, i, *_valid_call(rng))
    earlier = rng.randrange(max(1, i))
    row["id"] = rng.choice([f"r{earlier}", f"r{earlier}#2", f"r{earlier}#3", "r0", "ïd 🚀"])
    return row


def _k_no_call(rng: random.Random, i: int) -> Any:
    """Rows without a call: no "call" or "tool_calls" field, or a null call."""
    if rng.random() < 0.5:
        return {"id": _error_id(rng, i), "tools": MAIN_TOOLS, "history": None}
    return {"id": _error_id(rng, i), "call": None, "tools": MAIN_TOOLS}


def _error_id(rng: random.Random, i: int) -> str:
    """An id for a row that becomes an error row: plain, or with text the writers escape."""
    return rng.choice([f"r{i}", f"ünï {i} 🚀", f'q"{i}\\', f"ctl\x01{i}\u2028"])


def _k_tool_calls_not_list(rng: random.Random, i: int) -> Any:
    return {"id": _error_id(rng, i), "tools": MAIN_TOOLS, "tool_calls": rng.choice([{"name": "ping"}, "x", 5, None])}


def _k_not_object(rng: random.Random, i: int) -> Any:
    return rng.choice([[1, 2], "a string", 42, None, True, []])


def _k_deep_members(rng: random.Random, i: int) -> Any:
    """A history or a tool list nesting deeper than the parsers go: the rest of the row is read."""
    if rng.random() < 0.5:
        return {"id": f"r{i}", "tools": MAIN_TOOLS, "history": _nested(1500), "call": {"name": "ping"}}
    return {"id": f"r{i}", "tools": _nested(1500), "call": {"name": "ping", "arguments": {}}}


def _k_id_object(rng: random.Random, i: int) -> Any:
    return {"id": rng.choice([{"an": "object"}, ["a", "list"]]), "tools": MAIN_TOOLS}


def _k_not_json(rng: random.Random, i: int) -> Any:
    """Lines that are not JSON, and one that repeats a key (returned as bytes)."""
    return rng.choice(
        [
            b'{"id": "broken", "call": ',
            b"not json at all",
            b'{"id": "x", "call": {"name": "ping"}} trailing',
            b'{"id": "nan", "call": {"name": "calc", "arguments": {"x": NaN}}}',
            b'{"id": "inf", "call": {"name": "calc", "arguments": {"x": Infinity}}}',
            b'{"id": "dup-key", "id": "second", "call": {"name": "ping"}}',
            b'{"id": "surrogate\\ud800", "call": {"name": "ping"}}',
            b'{"id": "big", "call": {"name": "calc", "arguments": {"x": ' + b"9" * 5000 + b"}}}",
            b"[" * 1500 + b"]" * 1500,
            b'{"id": "x", "call": {"name": "ping"}',
            b"\x00",
        ]
    )


def _k_not_utf8(rng: random.Random, i: int) -> Any:
    """Lines with bytes that are not UTF-8 (returned as bytes)."""
    return rng.choice(
        [
            b'{"id": "bad-utf8-\xff\xfe", "call": {"name": "ping"}}',
            b'{"id": "latin1-caf\xe9", "call": {"name": "ping"}}',
            b'{"id": "overlong", "call": {"name": "p\xc0\xafng"}}',
        ]
    )


KINDS: dict[str, Row] = {
    "valid": _k_valid,
    **{
        check: _check_kind(check)
        for check in (
            "non_existent_function",
            "non_existent_parameter",
            "incorrect_parameter_type",
            "missing_required_parameter",
            "allowed_values_violation",
            "json_schema_violation",
        )
    },
    "many_findings": _k_many_findings,
    "several_failing": _k_several_failing,
    "empty_spec": _k_empty_spec,
    "broken_named": _k_broken_named,
    "broken_unnamed": _k_broken_unnamed,
    "tool_shapes": _k_tool_shapes,
    "call_errors": _k_call_errors,
    "deep_ok": _k_deep_ok,
    "special_values": _k_special_values,
    "parallel": _k_parallel,
    "parallel_odd": _k_parallel_odd,
    "exotic_id": _k_exotic_id,
    "latency_id": _k_latency_id,
    "duplicate": _k_duplicate,
    "no_call": _k_no_call,
    "tool_calls_not_list": _k_tool_calls_not_list,
    "not_object": _k_not_object,
    "deep_members": _k_deep_members,
    "id_object": _k_id_object,
    "not_json": _k_not_json,
    "not_utf8": _k_not_utf8,
}
"""Every row kind, by name. The first `len(KINDS)` lines of a corpus are one of each."""

_WEIGHTS = {
    "valid": 12,
    "special_values": 4,
    "parallel": 4,
    "call_errors": 3,
    "tool_shapes": 3,
    "exotic_id": 3,
    "duplicate": 2,
    "not_json": 2,
    "broken_named": 2,
}


def _encode(rng: random.Random, row: Any) -> bytes:
    """A row as one JSON line, written in one of the ways producers write JSON."""
    pick = rng.randrange(3)
    if pick == 0:
        text = json.dumps(row, ensure_ascii=False, allow_nan=False)
    elif pick == 1:
        text = json.dumps(row, ensure_ascii=True, allow_nan=False)  # \uXXXX escapes, surrogate pairs
    else:
        text = json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _DEEP.sub(lambda match: _deep_text(int(match[1])), text).encode("utf-8")


def _deep_text(depth: int) -> str:
    """The JSON text of `_nested(depth)`, for any depth."""
    opening = "".join("[" if i % 2 else '{"n":' for i in reversed(range(depth)))
    closing = "".join("]" if i % 2 else "}" for i in range(depth))
    return opening + '"bottom"' + closing


def corpus(n: int, seed: int) -> list[bytes]:
    """At least `n` lines of JSON Lines input, the same for the same arguments: one row of every
    kind first (in a shuffled order), then rows drawn at random; blank lines, CRLF endings,
    leading whitespace and BOMs here and there, a BOM on the first line, and for odd seeds a
    last line without its newline."""
    rng = random.Random(seed)
    names = list(KINDS)
    rng.shuffle(names)
    weights = [_WEIGHTS.get(name, 1) for name in KINDS]
    lines: list[bytes] = []
    i = 0
    while i < max(n, len(names)):
        name = names[i] if i < len(names) else rng.choices(list(KINDS), weights)[0]
        row = KINDS[name](rng, i)
        line = row if isinstance(row, bytes) else _encode(rng, row)
        if rng.random() < 0.03:
            line = rng.choice([b" ", b"\t", b"\xef\xbb\xbf"]) + line  # leading space; a BOM (concatenated files)
        lines.append(line + (b"\r\n" if rng.random() < 0.05 else b"\n"))
        if rng.random() < 0.03:
            lines.append(rng.choice([b"\n", b"   \n", b"\t\r\n"]))  # blank lines: skipped, but counted
        i += 1
    lines[0] = b"\xef\xbb\xbf" + lines[0]  # a BOM, as some editors write one
    if seed % 2:
        lines[-1] = lines[-1].rstrip(b"\r\n") or lines[-1]  # a last line without its newline
    return lines


def write_corpus(path: Any, n: int, seed: int) -> int:
    """Write `corpus(n, seed)` to `path`; returns the number of bytes written."""
    data = b"".join(corpus(n, seed))
    with open(path, "wb") as f:
        f.write(data)
    return len(data)
