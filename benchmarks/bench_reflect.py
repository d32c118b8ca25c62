"""Semantic-stage cost per reflection, against the loopback stand-in judge (issue 3 targets).

Starts `python -m reflection.testing.server` as a separate process (so its CPU is not
counted), then reflects a typical single-turn call with 5 tools, sequentially, in both
modes. Per reflection it prints judge requests, prompt characters, prompt tokens and client
CPU time; beside it, the CPU of the bare SDK call (`AsyncOpenAI.chat.completions.create`
with the same messages) measured in the same run, so the ratio is reflection's own overhead.

Targets: combined = 1 request with all four checks; <= 12,000 prompt characters; <= 5 ms CPU.

    python benchmarks/bench_reflect.py [--reflections 300]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import httpx
import openai

from reflection import ReflectionConfig, Reflector
from reflection.formats import normalize_call, normalize_history, normalize_tools
from reflection.grounding import ground_call
from reflection.judge import JudgeConfig
from reflection.model import SEMANTIC_CHECKS
from reflection.semantic import SemanticRequest, build_messages


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


TOOLS = [
    _tool(
        "book_flight",
        "Book a one-way flight for one or more passengers. Dates are ISO 8601 (YYYY-MM-DD); airports are IATA codes.",
        {
            "origin": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "IATA code of the departure airport"},
            "destination": {
                "type": "string",
                "pattern": "^[A-Z]{3}$",
                "description": "IATA code of the arrival airport",
            },
            "date": {"type": "string", "format": "date", "description": "Departure date, YYYY-MM-DD"},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9, "default": 1},
            "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"], "default": "economy"},
        },
        ["origin", "destination", "date"],
    ),
    _tool(
        "search_flights",
        "Search available flights between two airports on a date.",
        {"origin": {"type": "string"}, "destination": {"type": "string"}, "date": {"type": "string", "format": "date"}},
        ["origin", "destination", "date"],
    ),
    _tool(
        "get_booking", "Look up an existing booking by its reference.", {"reference": {"type": "string"}}, ["reference"]
    ),
    _tool(
        "cancel_booking",
        "Cancel a booking. Irreversible; confirm with the user first.",
        {"reference": {"type": "string"}},
        ["reference"],
    ),
    _tool("get_weather", "Current weather for a city.", {"city": {"type": "string"}}, ["city"]),
]
HISTORY = [
    {"role": "system", "content": "You are a travel assistant. Use the tools to help the user. Today is 2026-11-21."},
    {
        "role": "user",
        "content": "Please book me a business class flight from JFK to LHR on 2026-12-24 for 2 passengers.",
    },
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {
        "name": "book_flight",
        "arguments": '{"origin": "JFK", "destination": "LHR", "date": "2026-12-24", "passengers": 2, "cabin": "business"}',
    },
}


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reflection.testing.server", "--idle-timeout", "60"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def run_mode(base_url: str, mode: str, n: int) -> dict[str, float]:
    config = ReflectionConfig(judge=JudgeConfig(base_url=base_url, model="stand-in"), mode=mode)
    async with Reflector(config) as reflector:
        await reflector.reflect(CALL, TOOLS, HISTORY)  # warm the connection pool and caches
        requests = chars = tokens = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            result = await reflector.reflect(CALL, TOOLS, HISTORY)
            assert result.overall_valid is True, result.semantic
            requests += result.usage.requests
            chars += result.usage.prompt_chars
            tokens += result.usage.prompt_tokens
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "requests": requests / n,
        "chars": chars / n,
        "tokens": tokens / n,
        "cpu_ms": cpu / n * 1000,
        "wall_ms": wall / n * 1000,
        "checks": len(result.semantic),
    }


async def run_bare_sdk(base_url: str, n: int) -> float:
    """CPU per request of the SDK alone, with the combined prompt: the floor for one request."""
    inventory, call, history = normalize_tools(TOOLS), normalize_call(CALL), normalize_history(HISTORY)
    request = SemanticRequest(
        call=call,
        spec=inventory.get(call.name),
        inventory=inventory,
        history=history,
        grounding=ground_call(call, history, inventory.get(call.name)),
    )
    messages, _ = build_messages(request, SEMANTIC_CHECKS, token_budget=3000)
    async with httpx.AsyncClient() as http:
        client = openai.AsyncOpenAI(api_key="x", base_url=base_url, http_client=http, max_retries=0)
        await client.chat.completions.create(model="stand-in", messages=messages, temperature=0)
        cpu0 = time.process_time()
        for _ in range(n):
            await client.chat.completions.create(model="stand-in", messages=messages, temperature=0)
        return (time.process_time() - cpu0) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reflections", type=int, default=300)
    args = parser.parse_args()
    proc, base_url = start_server()
    try:
        bare = asyncio.run(run_bare_sdk(base_url, args.reflections))
        rows = {mode: asyncio.run(run_mode(base_url, mode, args.reflections)) for mode in ("combined", "per_check")}
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"stand-in judge on loopback, {args.reflections} sequential reflections per mode, 5 tools, single turn")
    print(
        f"{'mode':<10} {'checks':>6} {'requests':>9} {'prompt chars':>13} {'prompt tokens':>14} {'client CPU ms':>14} {'vs bare SDK':>12}"
    )
    for mode, r in rows.items():
        print(
            f"{mode:<10} {r['checks']:>6} {r['requests']:>9.2f} {r['chars']:>13.0f} {r['tokens']:>14.0f} "
            f"{r['cpu_ms']:>14.2f} {r['cpu_ms'] / bare:>11.2f}x"
        )
    print(f"bare SDK request with the combined prompt: {bare:.2f} ms client CPU")
    c = rows["combined"]
    print(
        "targets: combined 1 request with 4 checks: {}; <= 12,000 prompt chars: {}; <= 5 ms CPU: {}".format(
            "met" if c["requests"] == 1 and c["checks"] == 4 else "MISSED",
            "met" if c["chars"] <= 12_000 else "MISSED",
            "met" if c["cpu_ms"] <= 5 else "MISSED",
        )
    )


if __name__ == "__main__":
    main()
