"""Grounding's CPU per row in the worst cases (issue 21, item 6), against ordinary rows of the
same size, in one run.

Each case is one row: a 2 MB conversation and a call whose 64 argument values (grounding's
bound per call) are looked for in it, as `ground_call` does. CPU time (`process_time`), best of
`--repeat`:

- long token: the history is one 2 MB token (random letters and digits), the values are
  prefixes of it of 64 lengths from 1 character to the whole token (every occurrence is a
  near miss: it stops inside the token);
- long token, numbers: the same with a 2 MB run of digits and 64 integer prefixes of it;
- repeated token: "aaaa…" 2 MB, values "a" × n (every position is an occurrence);
- near misses: 2 MB of short tokens that each hold the values inside them ("x5y7 …"),
  the values found nowhere whole;
- number table: 2 MB of numbers ("1.53 105 -1 …"), numeric values found nowhere as whole
  numbers (5 only inside "1.53", "105" or "-5" of another sign);
- words (clean): 2 MB of ordinary words, values that occur once near the end.

The target is under 0.5 s of CPU for any of these rows.

    python benchmarks/bench_grounding.py [--repeat 3] [--size 2000000]
"""

from __future__ import annotations

import argparse
import random
import string
import time
from typing import Any

from reflection.formats import normalize_call, normalize_history, normalize_tools
from reflection.grounding import ground_call

_VALUES = 64


def _case(history_text: str, values: list[Any]) -> tuple[Any, Any, Any]:
    names = [f"v{i}" for i in range(len(values))]
    tools = normalize_tools([{"name": "f", "parameters": {"type": "object", "properties": {n: {} for n in names}}}])
    call = normalize_call({"name": "f", "arguments": dict(zip(names, values, strict=True))})
    history = normalize_history(
        [
            {"role": "user", "content": "please use the tool output"},
            {"role": "tool", "tool_call_id": "1", "content": history_text},
        ]
    )
    return call, history, tools.get("f")


def _cpu(case: tuple[Any, Any, Any], repeat: int) -> tuple[float, int]:
    best, grounded = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        result = ground_call(*case)
        best = min(best, time.process_time() - start)
        grounded = sum(item.grounded for item in result)
    return best, grounded


def _lengths(size: int) -> list[int]:
    """64 prefix lengths from 1 to `size`, spread geometrically."""
    return sorted(
        {max(1, min(size, round(size ** (i / (_VALUES - 1))))) for i in range(_VALUES)} | set(range(1, _VALUES + 1))
    )[-_VALUES:]


def cases(size: int) -> list[tuple[str, tuple[Any, Any, Any]]]:
    rng = random.Random(21)
    token = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(size))
    digits = "".join(rng.choice(string.digits[1:]) for _ in range(size))
    words = " ".join(
        rng.choice(["alpha", "beta", "gamma", "delta", "city", "lisbon", "2025", "49.95"]) for _ in range(size // 6)
    )
    tail = " ".join(f"needle{i}" for i in range(_VALUES))
    return [
        ("long token", _case(token, [token[:n] for n in _lengths(size)])),
        (
            "long token, numbers",
            _case(digits, [int(digits[:n]) for n in range(1, 25)] + [digits[:n] for n in _lengths(size)[:40]]),
        ),
        ("repeated token", _case("a" * size, ["a" * n for n in _lengths(size)])),
        (
            "near misses",
            _case(
                " ".join(f"x{i % 10}y{i % 7}" for i in range(size // 5)),
                [str(i) for i in range(10)]
                + [f"{i}y" for i in range(10)]
                + [f"y{i}" for i in range(7)]
                + [f"x{i}y{j}z" for i in range(6) for j in range(6)]
                + ["x1y1 x2"],
            ),
        ),
        (
            "number table",
            _case(
                " ".join(f"{i % 9 + 1}.5{i % 7} {i % 90 + 10}5 -{i % 9}" for i in range(size // 12)),
                [5, 15, 25, 35, 45, 55, 65, 75, 85, 95] + [i + 0.25 for i in range(1, 55)],
            ),
        ),
        ("words (clean)", _case(words + " " + tail, [f"needle{i}" for i in range(_VALUES)])),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=2_000_000, help="history characters (default 2 MB)")
    args = parser.parse_args()
    for name, case in cases(args.size):
        cpu, grounded = _cpu(case, args.repeat)
        print(f"{name:<22} {cpu * 1000:8.1f} ms CPU per row, {grounded}/{len(case[0].arguments)} values grounded")


if __name__ == "__main__":
    main()
