"""The gate's own cost and its deadline (issue 12 targets), measured side by side in one run.

Three measurements, each against a baseline taken in the same run:

1. cascade: a fully grounded call to a low-risk tool under `judge_when: ungrounded`, with a
   judge configured. Judge requests made (target 0) and client CPU per `Gate.check` beyond
   `check_call` on the same call and tools (target < 100 µs).
2. judge: client CPU per `Gate.check` that asks the stand-in judge (a separate process, so
   its CPU is not counted; reply cache off) against `Reflector.reflect` on the same call,
   alternating call by call (target: the gate adds <= 5%).
3. deadline: a judge that accepts connections and never answers; wall time from
   `Gate.check` to the decision against `deadline_ms` (target: within deadline + 50 ms).

    python benchmarks/bench_gate.py [--decisions 5000] [--judged 300] [--deadline-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

from reflection import Gate, GatePolicy, ReflectionConfig, Reflector, ToolRule
from reflection.judge import JudgeConfig
from reflection.static import check_call


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
        "Book a one-way flight. Dates are ISO 8601 (YYYY-MM-DD); airports are IATA codes.",
        {
            "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "date": {"type": "string", "format": "date"},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
            "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"], "default": "economy"},
        },
        ["origin", "destination", "date"],
    ),
    _tool(
        "search_flights",
        "Search flights between two airports on a date.",
        {"origin": {"type": "string"}, "destination": {"type": "string"}, "date": {"type": "string", "format": "date"}},
        ["origin", "destination", "date"],
    ),
    _tool("get_booking", "Look up a booking by its reference.", {"reference": {"type": "string"}}, ["reference"]),
    _tool(
        "cancel_booking",
        "Cancel a booking. Irreversible; confirm with the user first.",
        {"reference": {"type": "string"}},
        ["reference"],
    ),
    _tool("get_weather", "Current weather for a city.", {"city": {"type": "string"}}, ["city"]),
]
HISTORY = [
    {"role": "system", "content": "You are a travel assistant. Today is 2026-11-21."},
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
POLICY = GatePolicy(judge_when="ungrounded", tools=(ToolRule(match="cancel_*", risk="high"),))


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reflection.testing.server", "--idle-timeout", "60"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def cpu_us(run, n: int, repeat: int = 5) -> float:
    """Best of `repeat` passes: client CPU per call, µs."""
    best = float("inf")
    for _ in range(repeat):
        cpu0 = time.process_time()
        run(n)
        best = min(best, (time.process_time() - cpu0) / n * 1e6)
    return best


async def cascade(base_url: str, n: int) -> dict[str, float]:
    config = ReflectionConfig(judge=JudgeConfig(base_url=base_url, model="stand-in"))
    requests = 0
    async with Gate(config, policy=POLICY) as gate:
        first = await gate.check(CALL, TOOLS, HISTORY)
        assert first.action == "allow" and first.result.judge_skipped.startswith("cascade"), first.reason

        def static(k: int) -> None:
            for _ in range(k):
                check_call(CALL, TOOLS)

        loop_cpu: list[float] = []
        for _ in range(5):
            cpu0 = time.process_time()
            for _ in range(n):
                decision = await gate.check(CALL, TOOLS, HISTORY)
                requests += decision.result.usage.requests
            loop_cpu.append((time.process_time() - cpu0) / n * 1e6)
        static_us = cpu_us(static, n)
    return {"gate_us": min(loop_cpu), "static_us": static_us, "requests": requests}


async def judged(base_url: str, n: int) -> dict[str, float]:
    config = ReflectionConfig(judge=JudgeConfig(base_url=base_url, model="stand-in"))
    always = GatePolicy(cache_size=0)  # ask the judge every time, as the Reflector does
    totals = {"reflector": 0.0, "gate": 0.0}
    requests = {"reflector": 0, "gate": 0}
    async with Reflector(config) as reflector, Gate(config, policy=always) as gate:
        for _ in range(20):  # warm pools and caches
            await reflector.reflect(CALL, TOOLS, HISTORY)
            await gate.check(CALL, TOOLS, HISTORY)
        for i in range(2 * n):
            # Alternate call by call (who goes first too): the machine's noise hits both alike.
            side = "gate" if (i % 2) ^ (i // 2 % 2) else "reflector"
            cpu0 = time.process_time()
            if side == "gate":
                decision = await gate.check(CALL, TOOLS, HISTORY)
                assert decision.action == "allow", decision.reason
                requests[side] += decision.result.usage.requests
            else:
                requests[side] += (await reflector.reflect(CALL, TOOLS, HISTORY)).usage.requests
            totals[side] += time.process_time() - cpu0
    return {
        "reflector_ms": totals["reflector"] / n * 1e3,
        "gate_ms": totals["gate"] / n * 1e3,
        "reflector_requests": requests["reflector"] / n,
        "gate_requests": requests["gate"] / n,
    }


async def deadline(deadline_ms: float, tries: int) -> list[tuple[str, float]]:
    out = []
    with socket.socket() as silent:  # accepts connections (kernel backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        config = ReflectionConfig(
            judge=JudgeConfig(base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1", model="silent", timeout=30)
        )
        policy = GatePolicy(deadline_ms=deadline_ms, tools=(ToolRule(match="cancel_*", risk="high"),))
        cancel = {"name": "cancel_booking", "arguments": {"reference": "ABC123"}}
        async with Gate(config, policy=policy) as gate:
            for i in range(tries):
                call = CALL if i % 2 == 0 else cancel
                t0 = time.perf_counter()
                decision = await gate.check(call, TOOLS, HISTORY)
                out.append((decision.action, (time.perf_counter() - t0) * 1000))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=5000, help="cascade decisions per pass (5 passes)")
    parser.add_argument("--judged", type=int, default=1000, help="judged reflections per side")
    parser.add_argument("--deadline-ms", type=float, default=200.0)
    parser.add_argument("--deadline-tries", type=int, default=6)
    args = parser.parse_args()
    proc, base_url = start_server()
    try:
        c = asyncio.run(cascade(base_url, args.decisions))
        j = asyncio.run(judged(base_url, args.judged))
    finally:
        proc.terminate()
        proc.wait(10)
    d = asyncio.run(deadline(args.deadline_ms, args.deadline_tries))

    beyond = c["gate_us"] - c["static_us"]
    print(f"1. cascade, grounded low-risk call, judge configured, {args.decisions} decisions x 5 passes (best pass)")
    print(
        f"   Gate.check {c['gate_us']:.1f} µs CPU; check_call {c['static_us']:.1f} µs; beyond the static check "
        f"{beyond:.1f} µs ({c['gate_us'] / c['static_us']:.2f}x); judge requests {c['requests']:.0f}"
    )
    overhead = j["gate_ms"] / j["reflector_ms"] - 1
    print(f"2. judged, stand-in judge on loopback, {args.judged} calls per side, alternating call by call")
    print(
        f"   Reflector.reflect {j['reflector_ms']:.3f} ms CPU ({j['reflector_requests']:.2f} requests); "
        f"Gate.check {j['gate_ms']:.3f} ms ({j['gate_requests']:.2f} requests); ratio {j['gate_ms'] / j['reflector_ms']:.3f}x "
        f"({overhead:+.1%})"
    )
    worst = max(ms for _, ms in d)
    print(f"3. deadline {args.deadline_ms:g} ms, judge never answers, {len(d)} decisions (low / high risk alternating)")
    print(
        "   "
        + ", ".join(f"{action} {ms:.0f} ms" for action, ms in d)
        + f"; worst {worst:.0f} ms = deadline {worst - args.deadline_ms:+.0f} ms"
    )
    print(
        "targets: zero judge requests: {}; < 100 µs beyond the static check: {}; gate <= +5% over Reflector: {}; "
        "within deadline + 50 ms: {}".format(
            "met" if c["requests"] == 0 else "MISSED",
            "met" if beyond < 100 else "MISSED",
            "met" if overhead <= 0.05 else "MISSED",
            "met" if worst <= args.deadline_ms + 50 else "MISSED",
        )
    )


if __name__ == "__main__":
    main()
