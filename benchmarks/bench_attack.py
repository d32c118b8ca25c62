"""The service under attack: a small well-behaved client's latency while each attack runs, against
its latency with no attack, side by side in one run (issue 22, item 10). Loopback only, bounded.

`reflection serve` (its own process, one worker, API keys `good` and `bad`, the default limits,
an open-file limit of `--nofile` like a default Linux shell's) sits in front of a hostile upstream
model (its own process). The well-behaved client (its own process) posts a one-call row to
`/v1/gate` with key `good` over `--clients` keep-alive connections, pausing `--think` between
requests, for `--seconds`. Each arm runs it once while one attack runs from an attacker process
with key `bad` (or no key).

The attacker and the hostile upstream stand for other machines: in a deployment their CPU is not
the service's. On one small machine it is, and an attacker busy with its own side (opening 1,100
connections again and again, writing 64 MB replies) takes cores from the service and the client
alike, which measures the machine, not the service. So both run at the lowest scheduling priority
(`--attacker-nice 19`): they get every core the service and the client leave idle, and wait when
those want it. `--attacker-nice 0` runs them at equal priority (the co-located worst case). Arms:

- none: no attack (first and last: the drift of the machine between them);
- idle-connections: `--hoard` connections opened and never used, reopened when closed;
- partial-headers: as many, each sending a request line and then a header byte a second;
- trickled-bodies: `--trickle` requests from one key, each body a byte every half second;
- 10000-calls: `/v1/gate` with 10,000 parallel calls, back to back over two connections;
- 1024-calls: the same with 1,024 calls (`service.max_calls_per_request`'s default: admitted);
- schema-expansion: `/v1/check` with a `$defs` schema of `--schema-levels` levels, each referring to
  the next twice through `anyOf`, and a value no branch accepts (about 5x per two more levels:
  the issue's 18 levels took 33 s and 2.5 GB, so the default is smaller);
- huge-upstream-reply: the gateway, whose upstream answers with a `--reply-mb` MB completion,
  chunked with no declared length (a declared length past `upstream.max_response_bytes` is refused
  before its body is read, so this is the case where the gateway must read up to the cap).

Printed per arm: the client's requests, failures (anything but 200, or no answer), p50 and p99
(ms), the p99 as a ratio of the no-attack arms' mean p99, the service's peak RSS while the arm ran,
the service's and the attackers' CPU (share of one core; the attackers are the attacker process
and the hostile upstream), and what the attacker's requests got. Targets (the issue's): p99 within 2x, no failures, peak RSS
under 500 MB.

    python benchmarks/bench_attack.py [--seconds 6] [--clients 2] [--think 0.02] [--hoard 1100]
                                      [--trickle 256] [--schema-levels 14] [--reply-mb 64]
                                      [--nofile 1024] [--attacker-nice 19] [--only ARM ...]
                                      [--service-root DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

# Measure the checkout this script lives in, not whichever copy of the package is installed.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOOD, BAD = "good", "bad"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast for a city over a number of days.",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
            },
        },
    }
]
HISTORY = [{"role": "user", "content": "What's the weather in Paris for the next 2 days?"}]
GOOD_ROW = {
    "id": "good",
    "call": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
    "tools": TOOLS,
    "history": HISTORY,
}
ARMS = (
    "none",
    "idle-connections",
    "partial-headers",
    "trickled-bodies",
    "10000-calls",
    "1024-calls",
    "schema-expansion",
    "huge-upstream-reply",
)


def _env(root: Path = ROOT) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return env


# --- the processes -----------------------------------------------------------------------------------


def _limit_files(nofile: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return apply


def start_service(
    tmp: Path, upstream: str, nofile: int, root: Path = ROOT
) -> tuple[subprocess.Popen[bytes], str, Path]:
    config = tmp / "config.yaml"
    config.write_text(json.dumps({"service": {"api_keys": [GOOD, BAD]}, "upstream": {"base_url": upstream}}))
    log = tmp / "service.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from reflection.cli import app; app()",
                "serve",
                "--config",
                str(config),
                "--port",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_env(root),
            cwd=root,
            preexec_fn=_limit_files(nofile),
        )  # safe between fork and exec: no threads here yet
    return process, _wait_for(process, log, r"serving on (http://127\.0\.0\.1:\d+)", "/healthz"), log


def _niced(nice: int) -> Any:
    return lambda: os.nice(nice)


def start_upstream(tmp: Path, reply_mb: int, nice: int) -> tuple[subprocess.Popen[bytes], str]:
    log = tmp / "upstream.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, __file__, "--hostile-upstream", str(reply_mb)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_env(),
            preexec_fn=_niced(nice),
        )  # safe between fork and exec: no threads here yet
    return process, _wait_for(process, log, r"upstream on (http://127\.0\.0\.1:\d+/v1)", "/models")


def _wait_for(process: subprocess.Popen[bytes], log: Path, pattern: str, probe: str) -> str:
    import httpx

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(match.group(1) + probe, timeout=1)
                return match.group(1)
        time.sleep(0.05)
    raise RuntimeError(f"server did not start: {log.read_text()}")


def hostile_upstream(reply_mb: int) -> None:
    """A model endpoint answering every completion with `reply_mb` MB of text (built once), chunked
    with no declared length, 1 MiB a chunk."""
    import socket

    content = "x" * (reply_mb * 1024 * 1024)
    reply = json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "huge",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        }
    ).encode()
    del content
    view = memoryview(reply)
    step = 1 << 20

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if length:
                    await reader.readexactly(int(length.group(1)))
                if head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n")
                    writer.write(b'{"data": []}')
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                for start in range(0, len(view), step):
                    piece = view[start : start + step]
                    writer.write(b"%x\r\n" % len(piece))
                    writer.write(piece)
                    writer.write(b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(handle, sock=sock)
        print(f"upstream on http://127.0.0.1:{sock.getsockname()[1]}/v1", file=sys.stderr, flush=True)
        async with server:
            await asyncio.sleep(3600)  # bounded: the benchmark kills it long before

    asyncio.run(main())


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# --- the well-behaved client (its own process) ---------------------------------------------------------


def client(url: str, seconds: float, clients: int, think: float) -> None:
    """Post GOOD_ROW to /v1/gate over `clients` connections for `seconds`; print the latencies as JSON."""
    import httpx

    body = json.dumps(GOOD_ROW).encode()
    latencies: list[float] = []
    failures: Counter[str] = Counter()

    async def one(http: httpx.AsyncClient, stop: float) -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                response = await http.post("/v1/gate", content=body)
                if response.status_code != 200:
                    failures[str(response.status_code)] += 1
            except httpx.HTTPError as exc:
                failures[type(exc).__name__] += 1
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(think)

    async def main() -> None:
        headers = {"authorization": f"Bearer {GOOD}", "content-type": "application/json"}
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10, limits=limits) as http:
            for _ in range(20):  # warm-up: connections, caches (under attack: maybe refused)
                with contextlib.suppress(httpx.HTTPError):
                    await http.post("/v1/gate", content=body)
            stop = time.monotonic() + seconds
            await asyncio.gather(*(one(http, stop) for _ in range(clients)))

    asyncio.run(main())
    print(json.dumps({"latencies": latencies, "failures": failures}))


# --- the attacks (the attacker process) --------------------------------------------------------------------------


class Attack:
    """One attack run until `stop` is set; `seen` counts what its requests got."""

    def __init__(self, url: str, args: argparse.Namespace):
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.args = args
        self.seen: Counter[str] = Counter()
        self.stop = asyncio.Event()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self.host, self.port)

    async def pause(self, seconds: float) -> bool:
        """Sleep unless stopped first; True when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()

    async def hold(self, first: bytes, drip: bytes | None, every: float) -> None:
        """One hoarded connection: send `first`, then `drip` every `every` s, until the server closes
        it (then reopen) or the attack stops."""
        while not self.stop.is_set():
            try:
                reader, writer = await self.connect()
            except OSError as exc:
                self.seen[f"connect {type(exc).__name__}"] += 1
                if await self.pause(0.1):
                    return
                continue
            self.seen["connections"] += 1
            try:
                if first:
                    writer.write(first)
                closed = asyncio.ensure_future(reader.read(1 << 16))
                while not self.stop.is_set():
                    done, _ = await asyncio.wait({closed}, timeout=every)
                    if done:
                        answer = closed.result()
                        self.seen[answer[:12].decode("latin-1").strip() or "closed"] += 1
                        break
                    if drip:
                        writer.write(drip)
                closed.cancel()
            except OSError:
                self.seen["reset"] += 1
            finally:
                writer.close()
            if await self.pause(0.1):  # then reconnect
                return

    async def post_loop(self, path: str, body: bytes, key: str | None, connections: int) -> None:
        """`connections` clients posting `body` back to back, reading each whole answer."""
        auth = f"Authorization: Bearer {key}\r\n" if key else ""
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

        async def one() -> None:
            while not self.stop.is_set():
                try:
                    reader, writer = await self.connect()
                    try:
                        while not self.stop.is_set():
                            writer.write(request)
                            status = await _read_response(reader)
                            self.seen[str(status)] += 1
                    finally:
                        writer.close()
                except (OSError, asyncio.IncompleteReadError) as exc:
                    self.seen[type(exc).__name__] += 1
                    if await self.pause(0.1):
                        return

        await asyncio.gather(*(one() for _ in range(connections)))

    async def run(self, name: str) -> None:
        args = self.args
        if name == "none":
            await self.stop.wait()
        elif name == "idle-connections":
            await asyncio.gather(*(self.hold(b"", None, 1.0) for _ in range(args.hoard)))
        elif name == "partial-headers":
            line = b"POST /v1/gate HTTP/1.1\r\nHost: x\r\nX-Slow: "
            await asyncio.gather(*(self.hold(line, b"a", 1.0) for _ in range(args.hoard)))
        elif name == "trickled-bodies":
            head = (
                f"POST /v1/gate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BAD}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            ).encode()
            await asyncio.gather(*(self.hold(head, b" ", 0.5) for _ in range(args.trickle)))
        elif name in ("10000-calls", "1024-calls"):
            count = int(name.split("-")[0])
            calls = [{"name": "get_weather", "arguments": {"city": f"city {i}", "days": 2}} for i in range(count)]
            body = json.dumps({"id": "many", "tool_calls": calls, "tools": TOOLS}).encode()
            await self.post_loop("/v1/gate", body, BAD, 2)
        elif name == "schema-expansion":
            await self.post_loop("/v1/check", json.dumps(expansion_row(args.schema_levels)).encode(), BAD, 1)
        elif name == "huge-upstream-reply":
            body = json.dumps({"model": "huge", "messages": HISTORY, "tools": TOOLS}).encode()
            await self.post_loop("/v1/chat/completions", body, BAD, 1)
        else:
            raise ValueError(name)


def expansion_row(levels: int) -> dict[str, Any]:
    """A call against a `$defs` schema whose every level refers to the next twice (`anyOf`), with
    a value that no branch accepts: 2**levels paths to try and to report."""
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    tool = {
        "name": "expand",
        "parameters": {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}},
    }
    return {"id": "expand", "call": {"name": "expand", "arguments": {"x": "not a number"}}, "tools": [tool]}


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining:
            remaining -= len(await reader.read(min(remaining, 1 << 20)))
            if reader.at_eof() and remaining:
                raise asyncio.IncompleteReadError(b"", remaining)
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    if headers.get("connection") == "close":
        raise ConnectionResetError("the server closed the connection")
    return status


# --- one arm ----------------------------------------------------------------------------------------------


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU of this process (None) or of process `pid` (Linux /proc; 0 elsewhere)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")


async def arm(name: str, url: str, pid: int, upstream_pid: int, args: argparse.Namespace) -> dict[str, Any]:
    started = (cpu_seconds(upstream_pid), cpu_seconds(pid), time.monotonic())
    attacker = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--attack",
        name,
        url,
        json.dumps(vars(args)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=_env(),
        preexec_fn=_niced(args.attacker_nice),
    )  # safe between fork and exec: no threads here
    peak = rss_mb(pid)
    if name != "none":
        await asyncio.sleep(1.0)  # the attack in full swing before the client starts
    measured = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        url,
        str(args.seconds),
        str(args.clients),
        str(args.think),
        stdout=asyncio.subprocess.PIPE,
        env=_env(),
    )
    reading = asyncio.ensure_future(measured.communicate())
    while not reading.done():
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.1)
    wall = time.monotonic() - started[2]
    attacker_cpu = cpu_seconds(attacker.pid) + cpu_seconds(upstream_pid) - started[0]
    service_cpu = cpu_seconds(pid) - started[1]
    assert attacker.stdin is not None
    attacker.stdin.close()  # the attack stops, and says what it saw
    seen = json.loads((await asyncio.wait_for(attacker.communicate(), 60))[0])
    out = json.loads(reading.result()[0])
    return {
        "latencies": out["latencies"],
        "failures": out["failures"],
        "peak_rss_mb": peak,
        "seen": seen,
        "attacker_cpu": attacker_cpu / wall,
        "service_cpu": service_cpu / wall,
    }


def attacker(name: str, url: str, args: argparse.Namespace) -> None:
    """Run attack `name` until stdin ends; print what its requests got, as JSON."""

    async def main() -> Counter[str]:
        attack = Attack(url, args)
        attacking = asyncio.ensure_future(attack.run(name))
        await asyncio.to_thread(sys.stdin.buffer.read)  # until the parent closes it
        attack.stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(attacking, 30)
        return attack.seen

    print(json.dumps(asyncio.run(main())))


def settle(url: str, timeout: float = 120) -> None:
    """Wait until the service has nothing in flight and answers a probe quickly."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            started = time.perf_counter()
            text = httpx.get(url + "/metrics", timeout=5).text
            quick = time.perf_counter() - started < 0.05
            if quick and "reflection_http_in_flight 0.0" in text:
                time.sleep(0.5)
                return
        time.sleep(0.2)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(args: argparse.Namespace) -> None:
    arms = ["none", *(a for a in ARMS[1:] if not args.only or a in args.only), "none"]
    print(
        f"well-behaved client: {args.clients} connection(s) posting a one-call /v1/gate row, {args.think * 1000:.0f} ms "
        f"between requests, {args.seconds:g} s per arm; service: 1 worker, default limits, open-file limit "
        f"{args.nofile}; attacks: {args.hoard} hoarded connections, {args.trickle} trickled bodies, "
        f"{args.schema_levels}-level schema, {args.reply_mb} MB upstream reply; attacker and upstream at nice "
        f"{args.attacker_nice}; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        upstream, upstream_url = start_upstream(tmp, args.reply_mb, args.attacker_nice)
        service, url, log = start_service(tmp, upstream_url, args.nofile, Path(args.service_root).resolve())
        try:
            results = []
            for name in arms:
                settle(url)
                print(f"  running: {name}", file=sys.stderr, flush=True)
                results.append((name, asyncio.run(arm(name, url, service.pid, upstream.pid, args))))
            # The base: the mean p99 of the no-attack arms before and after, so a machine that got
            # busier or quieter during the run weighs on both sides alike.
            quiet = [_pct(result["latencies"], 0.99) * 1000 for name, result in results if name == "none"]
            base_p99 = sum(quiet) / len(quiet)
            print(
                f"{'attack':<22}{'requests':>9}{'failed':>8}{'p50 ms':>9}{'p99 ms':>9}{'p99 ratio':>11}"
                f"{'peak RSS MB':>13}{'service CPU':>13}{'attacker CPU':>14}  attacker saw"
            )
            for name, result in results:
                latencies = result["latencies"]
                p50, p99 = _pct(latencies, 0.5) * 1000, _pct(latencies, 0.99) * 1000
                failed = sum(result["failures"].values())
                seen = ", ".join(f"{k} {v}" for k, v in sorted(result["seen"].items(), key=lambda kv: -kv[1])[:5])
                failures = f" ({', '.join(f'{k} {v}' for k, v in result['failures'].items())})" if failed else ""
                print(
                    f"{name:<22}{len(latencies):>9}{failed:>8}{p50:>9.2f}{p99:>9.2f}{p99 / base_p99:>10.2f}x"
                    f"{result['peak_rss_mb']:>13.0f}{result['service_cpu']:>12.0%}{result['attacker_cpu']:>13.0%}"
                    f"  {seen or '-'}{failures}"
                )
            print(
                f"p99 ratio: against {base_p99:.2f} ms, the mean p99 of the two no-attack arms (target <= 2x, "
                "no failures, peak RSS < 500 MB)"
            )
            warnings = [line for line in log.read_text(errors="replace").splitlines() if '"level":"warning"' in line]
            for line in warnings[:3]:
                print("service warning:", json.loads(line)["msg"])
            print("machine load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
        finally:
            for process in (service, upstream):
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--hostile-upstream":
        hostile_upstream(int(sys.argv[2]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--attack":
        attacker(sys.argv[2], sys.argv[3], argparse.Namespace(**json.loads(sys.argv[4])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="the client's time per arm")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--think", type=float, default=0.02, help="seconds between one client's requests")
    parser.add_argument("--hoard", type=int, default=1100, help="connections of the hoarding attacks")
    parser.add_argument("--trickle", type=int, default=256, help="bodies trickled by one key")
    parser.add_argument("--schema-levels", type=int, default=14)
    parser.add_argument("--reply-mb", type=int, default=64)
    parser.add_argument("--nofile", type=int, default=1024, help="the service's open-file limit")
    parser.add_argument(
        "--attacker-nice",
        type=int,
        default=19,
        help="the attacker's and the hostile upstream's niceness (0: equal priority, the co-located worst case)",
    )
    parser.add_argument("--only", nargs="*", choices=ARMS[1:], help="run only these attacks")
    parser.add_argument(
        "--service-root",
        default=str(ROOT),
        help="run the service of another checkout (e.g. the previous release's), for a before/after",
    )
    run(parser.parse_args())


if __name__ == "__main__":
    main()
