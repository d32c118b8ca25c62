"""The service's overhead, measured side by side in one run (issue 13 and 25 targets).

1. Gateway, for each API it speaks (Chat Completions `/v1/chat/completions`, the Responses API
   `/v1/responses`, Anthropic Messages `/v1/messages`): clients post a request with tools, each
   answered by the stand-in model (`python -m reflection.testing.upstream`, its own process, which
   speaks all three) after LATENCY with one valid tool call in that API's shape. *direct*: the
   clients talk to the stand-in; *gateway*: they talk to `reflection serve` (its own process, one
   worker, no judge: the gate runs the static checks), which forwards to the same stand-in and
   gates the call. Each API is measured with one sequential client and with CONCURRENCY clients.
   Printed: latency p50 and p99 of each, the added latency (gateway minus direct) at p50 and p99,
   and the throughput ratio. Targets: added p50 <= 2 ms with one client; throughput >= 0.8x
   direct with CONCURRENCY clients (issue 25); with CONCURRENCY clients, added p50 <= 2 ms,
   p99 <= 10 ms and >= 0.9x direct for Chat Completions (issue 13).
2. `/v1/check`: CONCURRENCY clients post one row each time (a call, its tool specs, a short
   conversation) to `reflection serve`'s `/v1/check`, and to a bare FastAPI endpoint on the same
   stack (uvicorn with uvloop and httptools, one worker, its own process) that only parses the
   JSON body and echoes it. Printed: requests per second of each and the ratio.
   Target: >= 0.5x the echo endpoint.

The clients are raw asyncio HTTP/1.1 connections (keep-alive, one request in flight each), so
the load generator's own CPU stays small next to what is measured. Every process shares this
machine's cores: on a 2-core machine the servers, the stand-in and the clients compete, and a
busy machine shows it. So each arm also prints the CPU per request of every party (clients,
stand-in, gateway or endpoint), which wall-clock noise does not blur, and the throughput ratio
those CPU costs allow when the cores are the limit: (clients + stand-in) / (clients + stand-in
+ gateway) of the direct path's. `--baseline DIR` runs another checkout's service (e.g. main's)
side by side in the same run, for a before/after under the same load (Chat Completions only,
the one API every checkout serves). The arms of each measurement take turns: ROUNDS rounds, the
order turned each round, so no arm always meets the stand-in later than another.

The concurrent clients start spread over SPREAD stand-in latencies (client i after i x SPREAD x
LATENCY / CONCURRENCY), in every arm alike, as independent agents do. The stand-in answers after
exactly LATENCY, so clients that all start at once (`--spread 0`) stay in step for the whole run:
every round of requests reaches the gateway in one burst of CONCURRENCY, and the last of a burst
waits for the gateway's CPU on all the others (64 x ~0.45 ms), which real models' varying
latencies do not keep up.

    python benchmarks/bench_serve.py [--requests 3000] [--sequential-requests 300] [--check-requests 5000]
                                     [--concurrency 64] [--latency 0.05] [--workers 1] [--apis chat,responses,messages]
                                     [--rounds 3] [--spread 1] [--baseline DIR] [--python PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Measure the checkout this script lives in, not whichever copy of the package is installed.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from starlette.requests import Request  # noqa: E402 - FastAPI resolves the echo route's annotation here

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast for a city over a number of days.",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    "units": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                },
            },
        },
    }
]
HISTORY = [
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "user", "content": "What's the weather in Paris for the next 2 days?"},
]
SCRIPT = {
    "bench": [{"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}]
}
RESPONSES_TOOLS = [{"type": "function", **TOOLS[0]["function"]}]
MESSAGES_TOOLS = [
    {
        "name": TOOLS[0]["function"]["name"],
        "description": TOOLS[0]["function"]["description"],
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
]
APIS = {
    "chat": ("/v1/chat/completions", {"model": "bench", "messages": HISTORY, "tools": TOOLS}),
    "responses": (
        "/v1/responses",
        {
            "model": "bench",
            "instructions": HISTORY[0]["content"],
            "input": HISTORY[1]["content"],
            "tools": RESPONSES_TOOLS,
        },
    ),
    "messages": (
        "/v1/messages",
        {
            "model": "bench",
            "max_tokens": 256,
            "system": HISTORY[0]["content"],
            "messages": HISTORY[1:],
            "tools": MESSAGES_TOOLS,
        },
    ),
}
"""Per API: the path and a request with tools (the same question and tool in each API's shape)."""
CHECK_ROW = {
    "id": "bench",
    "call": {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'},
    },
    "tools": TOOLS,
    "history": HISTORY,
}


def _env(root: Path = ROOT) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return env


def start_upstream(latency: float, tmp: Path) -> tuple[subprocess.Popen[str], str]:
    script = tmp / "script.json"
    script.write_text(json.dumps(SCRIPT))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reflection.testing.upstream",
            "--script",
            str(script),
            "--latency",
            str(latency),
            "--idle-timeout",
            "600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def cpu_seconds(pid: int) -> float:
    """User + system CPU so far of a process and its live child processes (the workers), from
    Linux /proc; 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = [
            int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()
        ]
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK") + sum(cpu_seconds(c) for c in children)


def start_service(
    tmp: Path, upstream: str, workers: int, root: Path = ROOT, name: str = "service", python: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`reflection serve` of the checkout at `root`, or (`python`) the reflection installed for
    that interpreter, run from `tmp` with no PYTHONPATH; its build is printed."""
    from _build import build_of

    config = tmp / f"{name}.yaml"
    settings = {"base_url": upstream}
    if name != "baseline":  # an older checkout may not know the Anthropic upstream; it is measured on chat only
        settings["anthropic_base_url"] = upstream
    config.write_text(json.dumps({"upstream": settings}))  # JSON is YAML
    log = tmp / f"{name}.log"
    env, cwd = (_env(root), root) if python is None else (_env_without_checkout(), tmp)
    print(f"{name}: {build_of(python or sys.executable, env, str(cwd))}", flush=True)
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                python or sys.executable,
                "-c",
                "from reflection.cli import app; app()",
                "serve",
                "--config",
                str(config),
                "--port",
                "0",
                "--workers",
                str(workers),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=cwd,
        )  # `-c` puts the cwd first
    return process, _wait_for_url(process, log, r"serving on (http://127\.0\.0\.1:\d+)")


def _env_without_checkout() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_") and k != "PYTHONPATH"}


def start_echo(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = tmp / "echo.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, __file__, "--echo-server"], stdout=subprocess.DEVNULL, stderr=err, env=_env()
        )
    return process, _wait_for_url(process, log, r"echo on (http://127\.0\.0\.1:\d+)")


def _wait_for_url(process: subprocess.Popen[bytes], log: Path, pattern: str) -> str:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            url = match.group(1)
            for _ in range(400):
                try:
                    import httpx

                    httpx.get(url + "/healthz", timeout=1)
                    return url
                except Exception:  # noqa: BLE001 - not listening yet
                    time.sleep(0.05)
        time.sleep(0.05)
    raise RuntimeError(f"server did not start: {log.read_text()}")


def echo_server() -> None:
    """A bare endpoint on the service's stack: FastAPI on uvicorn (uvloop, httptools), parse and echo."""
    import socket

    import orjson
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import Response

    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(orjson.dumps(orjson.loads(await request.body())), media_type="application/json")

    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    print(f"echo on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    # The service's settings: uvloop and httptools (uvicorn's "auto" picks them), no access log.
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False, backlog=2048)
    uvicorn.Server(config).run(sockets=[sock])


# --- load ----------------------------------------------------------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def load(
    url: str, path: str, body: bytes, requests: int, concurrency: int, spread: float = 0.0
) -> tuple[list[float], float, int]:
    """Post `body` `requests` times over `concurrency` keep-alive connections, client i starting
    i x `spread` / `concurrency` s after the first: latencies (s), wall time, errors."""
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nAuthorization: Bearer bench\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    errors = 0
    remaining = requests

    async def client(number: int) -> None:
        nonlocal remaining, errors
        await asyncio.sleep(number * spread / concurrency)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                writer.write(request)
                status = await _read_response(reader)
                latencies.append(time.perf_counter() - started)
                errors += status != 200
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(number) for number in range(concurrency)))
    return latencies, time.perf_counter() - started, errors


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(
    url: str, path: str, body: bytes, requests: int, concurrency: int, servers: dict[str, int], spread: float = 0.0
) -> tuple[list[float], float, int, dict[str, float]]:
    """`load`, plus the CPU seconds per request each party spent: "clients" (this process) and
    every process in `servers` (name: pid)."""
    before = {name: cpu_seconds(pid) for name, pid in servers.items()}
    own = _own_cpu()
    latencies, wall, errors = asyncio.run(load(url, path, body, requests, concurrency, spread))
    cpu = {"clients": (_own_cpu() - own) / requests}
    cpu.update({name: (cpu_seconds(pid) - before[name]) / requests for name, pid in servers.items()})
    return latencies, wall, errors, cpu


def measure_arms(
    targets: dict[str, tuple[str, dict[str, int]]],
    path: str,
    body: bytes,
    requests: int,
    concurrency: int,
    rounds: int,
    spread: float,
) -> dict[str, tuple[list[float], float, int, dict[str, float]]]:
    """`measure` of every arm (name: (url, servers)), in `rounds` rounds of `requests / rounds`
    each, the arms' order turned by one each round. Measured one after the other, the arm that came
    later fared worse (the same two checkouts gave 0.77x and 0.68x in one order, 0.68x and 0.60x in
    the other; the stand-in keeps what it served and its CPU per request grew from run to run)."""
    names = list(targets)
    total: dict[str, tuple[list[float], float, int, dict[str, float]]] = {}
    for round_ in range(rounds):
        share = requests // rounds + (1 if round_ < requests % rounds else 0)
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            url, servers = targets[name]
            lat, wall, err, cpu = measure(url, path, body, share, concurrency, servers, spread)
            if name in total:
                was_lat, was_wall, was_err, was_cpu = total[name]
                done = len(was_lat)
                cpu = {k: (was_cpu[k] * done + v * share) / (done + share) for k, v in cpu.items()}
                lat, wall, err = was_lat + lat, was_wall + wall, was_err + err
            total[name] = (lat, wall, err, cpu)
    return {name: total[name] for name in names}


def _cpu_text(cpu: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds * 1e6:.0f} us" for name, seconds in cpu.items())


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _report(
    label: str,
    arms: dict[str, tuple[list[float], float, int, dict[str, float]]],
    services: list[str],
    concurrency: int,
    args: argparse.Namespace,
) -> None:
    print(label)
    for name, (lat, wall, err, cpu) in arms.items():
        print(
            f"  {name:8}: p50 {_pct(lat, 0.5) * 1000:7.2f} ms  p99 {_pct(lat, 0.99) * 1000:7.2f} ms  "
            f"{len(lat) / wall:8.1f} req/s  errors {err}   CPU per request: {_cpu_text(cpu)}"
        )
    direct, direct_wall, _, direct_cpu = arms["direct"]
    cores = os.cpu_count() or 1
    for name in services:
        if name not in arms:
            continue
        gated, gated_wall, _, cpu = arms[name]
        added50 = (_pct(gated, 0.5) - _pct(direct, 0.5)) * 1000
        added99 = (_pct(gated, 0.99) - _pct(direct, 0.99)) * 1000
        ratio = (len(gated) / gated_wall) / (len(direct) / direct_wall)
        target = "(target <= 2)" if concurrency == 1 else "(issue 13 target for chat <= 2)"
        print(
            f"  {name}: added latency p50 {added50:+.2f} ms {target}, p99 {added99:+.2f} ms; "
            f"throughput {ratio:.2f}x direct" + (" (target >= 0.8)" if concurrency > 1 else "")
        )
        if concurrency > 1:
            base_cpu = direct_cpu["clients"] + direct_cpu["stand-in"]
            direct_max = cores / base_cpu
            gated_max = min(cores / (base_cpu + cpu[name]), args.workers / cpu[name])
            print(
                f"    CPU-bound ceilings on {cores} cores: direct {direct_max:.0f} req/s, through it "
                f"{gated_max:.0f} req/s ({gated_max / direct_max:.2f}x; the clients' "
                f"{concurrency} / {args.latency * 1000:.0f} ms allow {concurrency / args.latency:.0f})"
            )


def run(args: argparse.Namespace) -> None:
    row = json.dumps(CHECK_ROW).encode()
    apis = [api.strip() for api in args.apis.split(",") if api.strip()]
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        upstream, upstream_url = start_upstream(args.latency, tmp)
        service, service_url = start_service(tmp, upstream_url, args.workers, python=args.python)
        processes = [upstream, service]
        services = {"gateway": (service, service_url)}
        if args.baseline:
            base, base_url = start_service(tmp, upstream_url, args.workers, Path(args.baseline).resolve(), "baseline")
            processes.append(base)
            services["baseline"] = (base, base_url)
        echo, echo_url = start_echo(tmp)
        processes.append(echo)
        try:
            upstream_base = upstream_url.removesuffix("/v1")
            for api in apis:
                path, request = APIS[api]
                body = json.dumps(request).encode()
                # The baseline checkout may not serve the newer APIs: it is compared on Chat Completions only.
                names = [n for n in services if n == "gateway" or api == "chat"]
                for url in (upstream_base, *(services[n][1] for n in names)):  # warm-up: connections, caches, imports
                    asyncio.run(load(url, path, body, 300, args.concurrency))
                for concurrency, requests in ((1, args.sequential_requests), (args.concurrency, args.requests)):
                    targets = {"direct": (upstream_base, {"stand-in": upstream.pid})}
                    for name in names:
                        process, url = services[name]
                        targets[name] = (url, {"stand-in": upstream.pid, name: process.pid})
                    spread = args.latency * args.spread if concurrency > 1 else 0.0
                    arms = measure_arms(targets, path, body, requests, concurrency, args.rounds, spread)
                    clients = (
                        "one sequential client"
                        if concurrency == 1
                        else f"{concurrency} concurrent clients started over {spread * 1000:.0f} ms"
                    )
                    _report(
                        f"gateway {api} ({path}), {clients}, {requests} requests each way, stand-in latency "
                        f"{args.latency * 1000:.0f} ms, gate static (no judge), {args.workers} worker(s)",
                        arms,
                        names,
                        concurrency,
                        args,
                    )

            print(
                f"/v1/check vs a bare parse-and-echo endpoint on the same stack, {args.check_requests} requests, "
                f"{args.concurrency} concurrent, {len(row)} byte row"
            )
            for url, path in [*((u, "/v1/check") for _, u in services.values()), (echo_url, "/echo")]:
                asyncio.run(load(url, path, row, 500, args.concurrency))
            rates, server_cpu = {}, {}
            for name, (process, url) in [*services.items(), ("echo", (echo, echo_url))]:
                path = "/echo" if name == "echo" else "/v1/check"
                _, wall, err, cpu = measure(url, path, row, args.check_requests, args.concurrency, {name: process.pid})
                rates[name], server_cpu[name] = args.check_requests / wall, cpu[name]
                label = f"{name} {path}"
                print(f"  {label:22}: {rates[name]:8.1f} req/s (errors {err})   CPU per request: {_cpu_text(cpu)}")
            for name in services:
                print(
                    f"  {name}: /v1/check {rates[name] / rates['echo']:.2f}x the echo's req/s (target >= 0.5); "
                    f"by the servers' CPU per request {server_cpu['echo'] / server_cpu[name]:.2f}x"
                )
        finally:
            for process in processes:
                process.terminate()
                process.wait(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="gateway requests per arm")
    parser.add_argument(
        "--sequential-requests", type=int, default=300, help="gateway requests per arm with one sequential client"
    )
    parser.add_argument(
        "--apis", default="chat,responses,messages", help="the gateway APIs to measure, comma-separated"
    )
    parser.add_argument("--check-requests", type=int, default=5000, help="/v1/check and echo requests per arm")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--rounds", type=int, default=3, help="gateway arms measured in this many rounds, their order turned each round"
    )
    parser.add_argument("--latency", type=float, default=0.05, help="the stand-in model's latency (s)")
    parser.add_argument(
        "--spread",
        type=float,
        default=1.0,
        help="the concurrent clients' starts spread over this many stand-in latencies (0: all at once)",
    )
    parser.add_argument("--workers", type=int, default=1, help="reflection serve --workers")
    parser.add_argument("--baseline", metavar="DIR", help="also measure the service of this checkout (e.g. main's)")
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="run the gateway with the reflection installed for this interpreter (e.g. a venv holding the "
        "mypyc-compiled build `pip install .` gives), not this checkout's sources",
    )
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        echo_server()
    else:
        run(args)


if __name__ == "__main__":
    main()
