"""Verdicts against a judge that answers the way real models do (issue 10 targets).

The same reflections run against the stand-in judge in each reply style of
`reflection.testing.REPLY_STYLES` and in a mixture of them. Every row has a known intended
verdict: half call the tool with a value the user gave (the stand-in passes every check:
valid), half with a value found nowhere (the stand-in scores the hallucination check 2:
invalid). Per style it prints right, wrong and unknown verdicts and judge requests per
reflection, then a PASS / MISS line per target:

- mixture: 0 wrong, at most 2% unknown, at most 1.25 judge requests per reflection;
- each style: 0 wrong; every style but truncated / empty: 0 unknown and at most 1.05
  requests per reflection; the exact style: 1 request per reflection.

A truncated reply is whole only when re-asked with a completion budget above 2048 tokens
(see `reflection.testing.TRUNCATED_BUDGET`): its numbers depend on the client's re-ask after
`finish_reason: "length"`. Retries wait 0 s here (`retry_max_wait=0`): the benchmark counts
requests and verdicts, it does not time backoff.

    python benchmarks/bench_judge_styles.py [--reflections 400] [--styles prose,think,mixture]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from reflection import ReflectionConfig, Reflector
from reflection.judge import JudgeConfig
from reflection.testing import REPLY_STYLES
from reflection.testing._protocol import ReplyStyler
from reflection.testing.server import StandInJudge

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_table",
            "description": "Book a restaurant table.",
            "parameters": {
                "type": "object",
                "properties": {"restaurant": {"type": "string"}, "people": {"type": "integer"}},
                "required": ["restaurant", "people"],
            },
        },
    },
]
CITIES = ["Paris", "Rome", "Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Quito", "Dakar", "Hanoi"]


def rows(n: int) -> list[tuple[dict, list, list, bool]]:
    """`n` reflections (call, tools, history, intended verdict), half valid, half invented."""
    out = []
    for i in range(n):
        city = f"{CITIES[i % len(CITIES)]}-{i}"
        history = [{"role": "user", "content": f"What's the weather in {city} today?"}]
        valid = i % 2 == 0
        value = city if valid else f"Atlantis-{i}"
        out.append(({"name": "get_weather", "arguments": {"city": value}}, TOOLS, history, valid))
    return out


async def run_style(server: StandInJudge, style: str, n: int, concurrency: int) -> dict[str, float]:
    server.styler = ReplyStyler(style)
    judge = JudgeConfig(base_url=server.base_url, model="stand-in", retry_max_wait=0.0)
    items = rows(n)
    async with Reflector(ReflectionConfig(judge=judge)) as reflector:
        results = await reflector.reflect_many([row[:3] for row in items], concurrency=concurrency)
    right = wrong = unknown = requests = 0
    for (_, _, _, intended), result in zip(items, results, strict=True):
        requests += result.usage.requests
        if result.overall_valid is None:
            unknown += 1
        elif result.overall_valid is intended:
            right += 1
        else:
            wrong += 1
    return {"right": right, "wrong": wrong, "unknown": unknown, "requests": requests / n}


def targets(style: str, row: dict[str, float], n: int) -> list[tuple[str, bool]]:
    out = [(f"{style}: 0 wrong verdicts", row["wrong"] == 0)]
    if style == "mixture":
        out.append((f"{style}: at most 2% unknown ({row['unknown'] / n:.1%})", row["unknown"] <= 0.02 * n))
        out.append((f"{style}: at most 1.25 requests per reflection ({row['requests']:.3f})", row["requests"] <= 1.25))
    elif style not in ("truncated", "empty"):
        out.append((f"{style}: 0 unknown ({row['unknown']})", row["unknown"] == 0))
        out.append((f"{style}: at most 1.05 requests per reflection ({row['requests']:.3f})", row["requests"] <= 1.05))
    if style == "exact":
        out.append((f"{style}: 1 request per reflection ({row['requests']:.3f})", row["requests"] == 1.0))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reflections", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--styles", default=",".join(REPLY_STYLES), help="comma-separated reply styles")
    args = parser.parse_args()
    styles = [s for s in args.styles.split(",") if s]
    unknown_styles = set(styles) - set(REPLY_STYLES)
    if unknown_styles:
        parser.error(f"unknown styles {sorted(unknown_styles)}; choose from {', '.join(REPLY_STYLES)}")
    n = args.reflections
    print(f"{n} reflections per style ({n // 2 + n % 2} valid, {n // 2} invalid), concurrency {args.concurrency}")
    print(f"{'style':<20} {'right':>6} {'wrong':>6} {'unknown':>8} {'requests/reflection':>20} {'seconds':>8}")
    checks: list[tuple[str, bool]] = []
    with StandInJudge(idle_timeout=60) as server:
        for style in styles:
            start = time.perf_counter()
            row = await run_style(server, style, n, args.concurrency)
            print(
                f"{style:<20} {row['right']:>6} {row['wrong']:>6} {row['unknown']:>8} {row['requests']:>20.3f}"
                f" {time.perf_counter() - start:>8.1f}",
                flush=True,
            )
            checks.extend(targets(style, row, n))
    print()
    for text, met in checks:
        print(f"{'PASS' if met else 'MISS'} {text}")
    missed = sum(not met for _, met in checks)
    print(f"\n{len(checks) - missed} of {len(checks)} targets met")


if __name__ == "__main__":
    asyncio.run(main())
