"""A local OpenAI-compatible stand-in judge server, for benchmarks and end-to-end tests.

It serves `POST /v1/chat/completions` on 127.0.0.1 only, with asyncio (one task per
connection, HTTP/1.1 keep-alive), so hundreds of concurrent slow requests cost no threads.
Replies follow the judge protocol deterministically: every check scores 5, except the
hallucination check, which scores 2 when the request's grounding shows a value found nowhere.
It can add latency and inject faults (429, 500, timeouts, non-JSON replies, out-of-range
scores), write its replies the way real models do (`reply_style`, one of
`reflection.testing.REPLY_STYLES`), and it stops by itself after `max_requests` requests or
`idle_timeout` seconds idle.

    with StandInJudge(latency=0.05) as server:
        config = JudgeConfig(base_url=server.base_url, model="stand-in")

Or as a process: `python -m reflection.testing.server --latency 0.05 --reply-style mixture`
prints its base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import random
import sys
import threading
import time
from typing import Any

import orjson

from reflection._json import dumps
from reflection.testing._protocol import (
    REPLY_STYLES,
    SCORE_REQUEST,
    TRUNCATED_BUDGET,
    BackgroundServer,
    ReplyStyler,
    check_reply,
    completion,
    request_data,
    requested_checks,
    score_reply,
)

__all__ = ["FAULT_KINDS", "TRANSPORT_FAULTS", "FaultyStandInJudge", "StandInJudge"]

FAULT_KINDS = ("429", "500", "timeout", "non_json", "out_of_range")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


def judge_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The stand-in's deterministic reply object for a judge request: a pass on every
    check (a low hallucination score when grounding found a value nowhere), or 5 for a
    scoring request."""
    checks = requested_checks(body)
    if tuple(checks) == SCORE_REQUEST:
        return score_reply(5, "the stand-in judge scores every answer 5")
    data = request_data(body)
    ungrounded = [g["path"] for g in data.get("grounding", []) if g.get("found_in") == "nowhere"]
    reply = {}
    for name in checks:
        if name == "general_hallucination_check" and ungrounded:
            reply[name] = check_reply(2, explanation=f"values found nowhere: {ungrounded}", confidence=0.8)
        else:
            reply[name] = check_reply(5, explanation="consistent with the conversation", confidence=0.9)
    return reply


class StandInJudge(BackgroundServer):
    """The stand-in server running on a background thread (context manager)."""

    _thread_name = "stand-in judge"

    def __init__(
        self,
        *,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        faults: tuple[str, ...] = FAULT_KINDS,
        timeout_delay: float = 3.0,
        seed: int = 0,
        max_requests: int = 1_000_000,
        idle_timeout: float = 120.0,
        port: int = 0,
        reject_json_schema: bool = False,
        reply_style: str = "exact",
    ):
        unknown = set(faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; choose from {FAULT_KINDS}")
        self.latency = latency
        self.fault_rate = fault_rate
        self.faults = faults
        self.timeout_delay = timeout_delay
        self.max_requests = max_requests
        self.idle_timeout = idle_timeout
        self.reject_json_schema = reject_json_schema
        self.styler = ReplyStyler(reply_style)
        """Writes the replies in `reply_style`; its `counts` say how many went out per style."""
        self.port = port
        self.requests = 0
        self.fault_counts: collections.Counter[str] = collections.Counter()
        self._random = random.Random(seed)
        self._last_request = time.monotonic()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        if (
            self._loop is not None and self._stop is not None and not self._loop.is_closed()
        ):  # not already stopped (idle)
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def serve(self) -> None:
        """Serve until stopped, idle for `idle_timeout`, or `max_requests` are answered."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await self._loop.create_server(self._protocol, "127.0.0.1", self.port, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=0.5)
                idle = time.monotonic() - self._last_request
                if idle > self.idle_timeout or self.requests >= self.max_requests:
                    break

    def _protocol(self) -> asyncio.Protocol:
        return _Connection(self)

    def respond(self, method: str, path: str, raw: bytes) -> tuple[int, str, dict[str, str], float]:
        """Status (0: a simulated timeout), JSON body, extra headers, and the delay before answering."""
        self._last_request = time.monotonic()
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            return 404, dumps({"error": {"message": f"no route {method} {path}"}}), {}, 0.0
        self.requests += 1
        delay = self.latency
        try:
            # orjson directly: the stand-in needs no exact big integers, and it is what a
            # benchmark's server spends its CPU on.
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return 400, dumps({"error": {"message": f"request body is not JSON: {exc}"}}), {}, delay
        fmt = body.get("response_format") or {}
        if self.reject_json_schema and fmt.get("type") == "json_schema":
            return 400, dumps({"error": {"message": "response_format json_schema is not supported"}}), {}, delay
        if self.fault_rate and self._random.random() < self.fault_rate:
            kind = self._random.choice(self.faults)
            self.fault_counts[kind] += 1
            if kind == "429":
                return 429, dumps({"error": {"message": "rate limited"}}), {"retry-after": "0"}, delay
            if kind == "500":
                return 500, dumps({"error": {"message": "internal error"}}), {}, delay
            if kind == "timeout":
                return 0, "", {}, delay + self.timeout_delay
            if kind == "non_json":
                return 200, dumps(completion("Sure! Here is my review: looks fine.", body)), {}, delay
            reply = judge_reply(body)
            for value in reply.values():
                value["score"] = 7
            return 200, dumps(completion(dumps(reply), body)), {}, delay
        return 200, dumps(self.styler.completion(judge_reply(body), body)), {}, delay


class _Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, one request at a time, answered after its delay.

    A protocol rather than asyncio streams: the stand-in's CPU per request sits in the
    latency of every request a benchmark makes, so it is kept small.
    """

    def __init__(self, judge: StandInJudge):
        self.judge = judge
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def _next(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        try:
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
        except ValueError:
            self._close()
            return
        if len(self.buffer) < end + 4 + length:
            return
        raw = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        status, payload, extra, delay = self.judge.respond(method, path, raw)
        self.busy = True
        loop = asyncio.get_running_loop()
        if status == 0:  # a simulated timeout: hold the connection, then drop it
            loop.call_later(delay, self._close)
        elif delay:
            loop.call_later(delay, self._answer, status, payload, extra)
        else:
            self._answer(status, payload, extra)

    def _answer(self, status: int, payload: str, extra: dict[str, str]) -> None:
        if self.transport is None:
            return
        data = payload.encode()
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            "content-type: application/json",
            f"content-length: {len(data)}",
            *(f"{k}: {v}" for k, v in extra.items()),
        ]
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        self.busy = False
        self._next()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# --- Transport faults: a server misbehaving on the wire (slow, huge, refusing) -----------------
# Kept apart from the reply logic above: these faults are about bytes and statuses, not replies.

TRANSPORT_FAULTS = ("trickle", "huge", "status")


class FaultyStandInJudge(StandInJudge):
    """The stand-in misbehaving on the wire on every request, for tests of a judge client's bounds:

    - `trickle`: the right reply, sent one byte every `trickle_interval` seconds (each read is
      quick, so only an overall deadline stops it); it hangs up after `trickle_for` seconds;
    - `huge`: HTTP 200 with a body of `huge_bytes` bytes and no content-length;
    - `status`: HTTP `status` (e.g. 401) with an OpenAI-style error message, as a server
      with a wrong key, model or path answers.
    """

    def __init__(
        self,
        *,
        transport_fault: str,
        status: int = 401,
        trickle_interval: float = 0.2,
        trickle_for: float = 30.0,
        huge_bytes: int = 64 * 1024 * 1024,
        **options: Any,
    ):
        if transport_fault not in TRANSPORT_FAULTS:
            raise ValueError(f"unknown transport fault {transport_fault!r}; choose from {TRANSPORT_FAULTS}")
        super().__init__(**options)
        self.transport_fault = transport_fault
        self.status = status
        self.trickle_interval = trickle_interval
        self.trickle_for = trickle_for
        self.huge_bytes = huge_bytes

    def _protocol(self) -> asyncio.Protocol:
        return _FaultyConnection(self)

    def respond(self, method: str, path: str, raw: bytes) -> tuple[int, str, dict[str, str], float]:
        """As the stand-in, but a `status` fault answers every request with that status."""
        status, payload, extra, delay = super().respond(method, path, raw)
        if self.transport_fault == "status":
            message = {
                401: "Incorrect API key provided",
                403: "You are not allowed to use this model",
                404: "The model does not exist",
            }.get(self.status, "refused by the stand-in")
            return self.status, dumps({"error": {"message": message, "code": self.status}}), {}, 0.0
        return status, payload, extra, delay


class _FaultyConnection(_Connection):
    """Writes each answer the way the server's transport fault says."""

    judge: FaultyStandInJudge

    def _answer(self, status: int, payload: str, extra: dict[str, str]) -> None:
        fault = self.judge.transport_fault
        if self.transport is None or fault == "status":
            super()._answer(status, payload, extra)
            return
        loop = asyncio.get_running_loop()
        if fault == "trickle":
            data = payload.encode()
            self.transport.write(
                (
                    f"HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
                ).encode()
            )
            give_up = loop.time() + self.judge.trickle_for
            self._trickle(memoryview(data), give_up)
        else:
            self.transport.write(
                b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{"padding": "'
            )
            self._pour(self.judge.huge_bytes)

    def _trickle(self, rest: memoryview, give_up: float) -> None:
        if self.transport is None:
            return
        if not rest or asyncio.get_running_loop().time() > give_up:
            self._close()
            return
        self.transport.write(bytes(rest[:1]))
        asyncio.get_running_loop().call_later(self.judge.trickle_interval, self._trickle, rest[1:], give_up)

    def _pour(self, left: int) -> None:
        if self.transport is None:
            return
        if left <= 0:
            self._close()
            return
        if self.transport.get_write_buffer_size() < 1024 * 1024:  # write only as fast as the client reads
            chunk = min(left, 256 * 1024)
            self.transport.write(b"x" * chunk)
            left -= chunk
        asyncio.get_running_loop().call_later(0.001, self._pour, left)


# --- end of transport faults -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Run the stand-in in the foreground and print its base URL."""
    parser = argparse.ArgumentParser(
        prog="python -m reflection.testing.server",
        description=__doc__.splitlines()[0],
        epilog="It listens on 127.0.0.1 only and prints its base URL (http://127.0.0.1:PORT/v1) on stdout "
        "once it is ready; point a judge's base_url at it (any model name and API key). Every check "
        "scores 5, except the hallucination check, which scores 2 when the request's grounding shows a "
        "value found nowhere. Idle exit: it exits by itself, with status 0, after --idle-timeout seconds "
        "without a request or once it has answered --max-requests requests, and prints on stderr how "
        "many requests it served; so a forgotten stand-in never outlives its test.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="the port to listen on, on 127.0.0.1 (default: 0, any free port; the URL printed names it)",
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.0,
        help="seconds to wait before answering each request, as a remote judge would (default: %(default)s)",
    )
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        help="the share of requests (0 to 1) answered with a fault chosen at random: HTTP 429 "
        "(retry-after 0), HTTP 500, a timeout (the connection held 3 s beyond --latency, then closed without an answer), a reply "
        "that is not JSON, or scores out of range (default: %(default)s, no faults)",
    )
    parser.add_argument(
        "--max-requests",
        type=int,
        default=1_000_000,
        help="exit after answering this many requests (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=120.0,
        help="exit after this many seconds without a request (default: %(default)s)",
    )
    parser.add_argument(
        "--reply-style",
        choices=REPLY_STYLES,
        default="exact",
        metavar="STYLE",
        help="write replies as real models do, one of: "
        + ", ".join(REPLY_STYLES)
        + " (mixture: each request in one of the others, picked from a hash of its messages; default: exact, the bare JSON object); "
        "a truncated reply is sent whole to a request "
        f"whose completion budget is above {TRUNCATED_BUDGET} tokens",
    )
    parser.add_argument(
        "--transport-fault",
        choices=TRANSPORT_FAULTS,
        help="misbehave on the wire on every request: trickle (the right reply, one byte every "
        "0.2 s, hanging up after 30 s), huge (HTTP 200 with a 64 MiB body and no "
        "content-length), status (HTTP --status with an OpenAI-style error, as a server with "
        "a wrong key, model or path answers) (default: none)",
    )
    parser.add_argument(
        "--status",
        type=int,
        default=401,
        help="the HTTP status of --transport-fault status, e.g. 401, 403 or 404 (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    options: dict[str, Any] = {
        "latency": args.latency,
        "fault_rate": args.fault_rate,
        "max_requests": args.max_requests,
        "idle_timeout": args.idle_timeout,
        "port": args.port,
        "reply_style": args.reply_style,
    }
    server = (
        FaultyStandInJudge(transport_fault=args.transport_fault, status=args.status, **options)
        if args.transport_fault
        else StandInJudge(**options)
    )

    server.run_in_foreground()
    print(f"served {server.requests} requests", file=sys.stderr)


if __name__ == "__main__":
    main()
