"""Hostile rows against clean rows of the same size: the static stage and grounding stay
bounded and proportional to the input (issue 11: items 1, 5, 6 and 7).

Each case is timed side by side with a clean row of about the same size, in one run:
- regex: a ~11 KB row whose 400 values meet a `pattern` with a backreference inside a
  look-ahead (the regex engine gives up: `invalid_api_spec`), against the same row with a
  plain pattern;
- grounding: 64 argument values against a 2 MB tool output that holds each of them only
  inside longer tokens, against a 2 MB output of spaces and words;
- enum: an 86 KB row of 850 values outside a 2000-value enum (the written row's size is
  printed too), against 850 values inside it;
- deep: arguments nested 100,000 levels, against a flat row of the same size.

    python benchmarks/bench_hostile.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from reflection._json import dumps
from reflection.formats import normalize_call, normalize_history
from reflection.grounding import ground_call
from reflection.pipeline import reflect_sync
from reflection.rows import parse_line, read_row, result_row

_HARD_PATTERN = r"^(?!(a*)*\1!)a+$"


def _row(tools: list[dict[str, Any]], arguments_json: str, history: Any = None) -> bytes:
    text = (
        f'{{"id": "r", "tools": {json.dumps(tools)}, "history": {json.dumps(history)}, '
        f'"call": {{"name": "{tools[0]["name"]}", "arguments": {arguments_json}}}}}'
    )
    return text.encode()


def _reflect_line(line: bytes) -> int:
    """Reflect one dataset line as `reflection check` does; the written row's size."""
    row = read_row(parse_line(line), 1)
    return len(dumps(result_row(row.id, reflect_sync(row.call, row.tools, row.history))))


def _time(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _case(name: str, hostile: Any, clean: Any, repeat: int, note: str = "") -> None:
    bad, bad_out = _time(hostile, repeat)
    good, good_out = _time(clean, repeat)
    sizes = f"; output {bad_out:,} vs {good_out:,} bytes" if isinstance(bad_out, int) else ""
    print(f"{name:<10} hostile {bad * 1000:9.1f} ms, clean {good * 1000:9.1f} ms: {bad / good:6.1f}x{sizes}{note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per case; the best counts")
    repeat = parser.parse_args().repeat

    def names_tool(pattern: str) -> list[dict[str, Any]]:
        return [
            {
                "name": "tag",
                "parameters": {
                    "type": "object",
                    "properties": {"names": {"type": "array", "items": {"type": "string", "pattern": pattern}}},
                },
            }
        ]

    values = json.dumps({"names": ["a" * (18 + i % 10) for i in range(400)]})
    hard, plain = _row(names_tool(_HARD_PATTERN), values), _row(names_tool("^a+$"), values)
    _case("regex", lambda: _reflect_line(hard), lambda: _reflect_line(plain), repeat, f" ({len(hard):,} byte row)")

    arguments = {f"k{i}": i % 10 if i < 32 else "abcdefgh"[i % 8] for i in range(64)}
    call = normalize_call({"name": "f", "arguments": arguments})
    noisy = normalize_history([{"role": "tool", "content": ("x1a2b3c4d5e6f7g8h9 " * 110_000)[:2_000_000]}])
    quiet = normalize_history([{"role": "tool", "content": ("lorem ipsum " * 170_000)[:2_000_000]}])
    _case("grounding", lambda: ground_call(call, noisy, None), lambda: ground_call(call, quiet, None), repeat)

    enum = [f"value-number-{i:05d}-of-the-allowed-set" for i in range(2000)]
    enum_tools = [
        {
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "string", "enum": enum}}},
            },
        }
    ]
    outside = _row(enum_tools, json.dumps({"items": [str(i % 10) for i in range(850)]}))
    inside = _row(enum_tools, json.dumps({"items": enum[:850]}))
    _case(
        "enum", lambda: _reflect_line(outside), lambda: _reflect_line(inside), repeat, f" ({len(outside):,} byte row)"
    )

    depth = 100_000
    deep_tools = [{"name": "f", "parameters": {"type": "object", "properties": {"a": {}}}}]
    deep = _row(deep_tools, '{"a": ' + "[" * depth + "]" * depth + "}")
    flat = _row(deep_tools, json.dumps({"a": [1] * (depth * 2 // 3)}))
    _case("deep", lambda: _reflect_line(deep), lambda: _reflect_line(flat), repeat, f" ({len(deep):,} byte row)")


if __name__ == "__main__":
    main()
