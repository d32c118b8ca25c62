"""A stand-in model endpoint for the gateway: scripted Chat Completions replies with tool calls.

It serves `POST /v1/chat/completions` (plain and `stream: true`) and `GET /v1/models` on
127.0.0.1 only, and stops by itself after `idle_timeout` seconds without a request. The reply
is chosen by the request's `model`: `script[model]` is a list of replies, and the reply used
is the one at the index of the number of `tool` messages in the request (clamped to the last),
so a model re-asked with feedback for a refused call gives the next scripted reply. A reply is

    {"content": "text" | None, "tool_calls": [{"name": ..., "arguments": {...} or "raw text"}]}

or an error: `{"status": 429, "error": {"message": ...}, "headers": {"retry-after": "1"}}`; a
`"delay": seconds` key makes that reply slow.
A model not in the script answers the text "ok" without tool calls. Every request body is kept
in `requests` (newest last; its raw bytes and headers in `raw_requests` and `headers`).

    with StandInModel({"m": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]}) as up:
        OpenAI(base_url=up.base_url, api_key="x").chat.completions.create(model="m", messages=[...])

Or as a process: `python -m reflection.testing.upstream --script script.json --latency 0.05`
prints its base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from reflection.testing._protocol import BackgroundServer

__all__ = ["StandInModel", "completion_chunks", "completion_reply"]


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _tool_calls(reply: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [
        {"id": f"call_{prefix}_{i}", "type": "function",
         "function": {"name": call["name"], "arguments": _arguments_text(call.get("arguments", {}))}}
        for i, call in enumerate(reply.get("tool_calls") or [])
    ]


_USAGE = {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}


def completion_reply(model: str, reply: dict[str, Any], serial: int) -> dict[str, Any]:
    """A `chat.completion` object for a scripted reply."""
    calls = _tool_calls(reply, str(serial))
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-standin-{serial}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
        "usage": dict(_USAGE),
    }


def completion_chunks(model: str, reply: dict[str, Any], serial: int, *, include_usage: bool = False) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects OpenAI would stream for a scripted reply: text word by
    word, then each tool call as a header chunk (id, name) and its arguments in three pieces."""
    base = {"id": f"chatcmpl-standin-{serial}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    words = (reply.get("content") or "").split(" ")
    out += [chunk({"content": word if i == 0 else " " + word}) for i, word in enumerate(words) if reply.get("content")]
    calls = _tool_calls(reply, str(serial))
    for i, call in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        text = call["function"]["arguments"]
        step = max(1, -(-len(text) // 3))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": text[j:j + step]}}]})
                for j in range(0, len(text), step)]
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if include_usage:
        out.append({**base, "choices": [], "usage": dict(_USAGE)})
    return out


class StandInModel(BackgroundServer):
    """The stand-in model server on a background thread (context manager), or `serve()` in a loop."""

    _thread_name = "stand-in model"

    def __init__(
        self,
        script: dict[str, list[dict[str, Any]]] | None = None,
        *,
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        idle_timeout: float = 120.0,
        port: int = 0,
    ):
        self.script = script or {}
        self.latency = latency
        self.chunk_delay = chunk_delay
        self.idle_timeout = idle_timeout
        self.port = port
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=10_000)
        self.raw_requests: collections.deque[bytes] = collections.deque(maxlen=10_000)
        self.headers: collections.deque[dict[str, str]] = collections.deque(maxlen=10_000)
        self._serial = itertools.count(1)
        self._last_request = time.monotonic()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: Any = None

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)

    def app(self) -> Any:
        """The Starlette application."""
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response, StreamingResponse
        from starlette.routing import Route

        async def models(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": name, "object": "model"} for name in self.script]})

        async def chat(request: Request) -> Response:
            self._last_request = time.monotonic()
            raw = await request.body()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                return JSONResponse({"error": {"message": f"request body is not JSON: {exc}"}}, status_code=400)
            self.requests.append(body)
            self.raw_requests.append(raw)
            self.headers.append(dict(request.headers))
            if self.latency:
                await asyncio.sleep(self.latency)
            model = str(body.get("model"))
            replies = self.script.get(model) or [{"content": "ok"}]
            rounds = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")
            reply = replies[min(rounds, len(replies) - 1)]
            if reply.get("delay"):
                await asyncio.sleep(reply["delay"])
            if "status" in reply:
                return JSONResponse({"error": reply.get("error", {"message": "scripted error"})},
                                    status_code=reply["status"], headers=reply.get("headers"))
            serial = next(self._serial)
            if not body.get("stream"):
                return Response(orjson.dumps(completion_reply(model, reply, serial)), media_type="application/json")
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = completion_chunks(model, reply, serial, include_usage=usage)

            async def events() -> AsyncIterator[bytes]:
                for item in chunks:
                    yield b"data: " + orjson.dumps(item) + b"\n\n"
                    if self.chunk_delay:
                        await asyncio.sleep(self.chunk_delay)
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])

    async def serve(self) -> None:
        """Serve until stopped or idle for `idle_timeout` seconds."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it; asyncio sets it only on sockets it creates itself, and
        # without it Nagle's algorithm and delayed ACKs add ~40 ms to every answer.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app(), log_level="warning", lifespan="off", backlog=2048))

        async def watch_idle() -> None:
            while not self._server.should_exit:
                await asyncio.sleep(0.2)
                if time.monotonic() - self._last_request > self.idle_timeout:
                    self._server.should_exit = True

        async def mark_ready() -> None:
            while not self._server.started:
                await asyncio.sleep(0.01)
            self._ready.set()

        watcher = asyncio.create_task(watch_idle())
        ready = asyncio.create_task(mark_ready())
        try:
            await self._server.serve(sockets=[sock])
        finally:
            watcher.cancel()
            ready.cancel()
            self._ready.set()


def main(argv: list[str] | None = None) -> None:
    """Run the stand-in model in the foreground and print its base URL."""
    parser = argparse.ArgumentParser(
        prog="python -m reflection.testing.upstream", description=__doc__.splitlines()[0],
        epilog="It listens on 127.0.0.1 only and prints its base URL (http://127.0.0.1:PORT/v1) on stdout "
               "once it is ready: point the gateway's upstream.base_url (or any OpenAI client) at it. The "
               "reply is chosen by the request's model: the script's reply at the index of the number of "
               "`tool` messages in the request (clamped to the last), so a model re-asked with feedback "
               "gives its next scripted reply; a model not in the script answers the text \"ok\". Idle exit: "
               "it exits by itself, with status 0, after --idle-timeout seconds without a request, and "
               "prints on stderr how many requests it served; so a forgotten stand-in never outlives its test.")
    parser.add_argument("--script", metavar="FILE",
                        help='a JSON file {model: [reply, ...]}; a reply is {"content": "text" or null, '
                             '"tool_calls": [{"name": ..., "arguments": {...} or "raw text"}]} or an error '
                             '{"status": 429, "error": {"message": ...}, "headers": {...}}, and "delay": seconds '
                             "makes it slow (default: none, every model answers \"ok\")")
    parser.add_argument("--port", type=int, default=0,
                        help="the port to listen on, on 127.0.0.1 (default: 0, any free port; the URL printed names it)")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds to wait before answering each chat request, as a remote model would "
                             "(default: %(default)s)")
    parser.add_argument("--chunk-delay", type=float, default=0.0,
                        help="seconds between the chunks of a streamed (`stream: true`) reply (default: %(default)s)")
    parser.add_argument("--idle-timeout", type=float, default=120.0,
                        help="exit after this many seconds without a request (default: %(default)s)")
    args = parser.parse_args(argv)
    script = json.loads(open(args.script, encoding="utf-8").read()) if args.script else {}  # noqa: SIM115
    server = StandInModel(script, latency=args.latency, chunk_delay=args.chunk_delay,
                          idle_timeout=args.idle_timeout, port=args.port)

    server.run_in_foreground()
    print(f"served {len(server.requests)} requests", file=sys.stderr)


if __name__ == "__main__":
    main()
