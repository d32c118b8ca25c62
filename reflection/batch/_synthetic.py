"""Synthetic dataset rows with known answers, for the batch tests and benchmarks.

Every row has a distinct call (so judge requests and cache keys differ) and a kind that
says what a correct reflection must conclude:

- `valid`: well-formed and every value grounded in the user's turn; the stand-in judge passes it.
- `ungrounded`: well-formed, but the city appears nowhere; the stand-in's hallucination check fails it.
- `static_invalid`: misses a required parameter; the static stage fails it, the judge never runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reflection._json import dumps

KINDS = ("valid", "ungrounded", "static_invalid")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
]


def synthetic_row(i: int, kind: str | None = None) -> dict[str, Any]:
    """Row `i`; its kind cycles through KINDS unless given. The id is `<kind>-<i>`."""
    kind = kind or KINDS[i % len(KINDS)]
    city = f"Springfield{i}"
    history = [{"role": "user", "content": f"What's the weather in {city} in celsius?"}]
    if kind == "valid":
        arguments = {"city": city, "unit": "celsius"}
    elif kind == "ungrounded":
        arguments = {"city": f"Atlantis{i}", "unit": "celsius"}
    elif kind == "static_invalid":
        arguments = {"city": city}
    else:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    call = {"id": f"call-{i}", "type": "function", "function": {"name": "get_weather", "arguments": dumps(arguments)}}
    return {"id": f"{kind}-{i}", "tools": TOOLS, "history": history, "call": call}


def synthetic_rows(n: int, kinds: tuple[str, ...] = KINDS) -> Iterator[dict[str, Any]]:
    """`n` rows cycling through `kinds`."""
    for i in range(n):
        yield synthetic_row(i, kinds[i % len(kinds)])


def write_jsonl(path: str | Path, rows: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> Path:
    """Write rows as JSON Lines (streaming)."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(dumps(row) + "\n")
    return path
