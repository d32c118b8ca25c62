"""A stand-in model endpoint for the gateway: scripted Chat Completions, Responses API and
Anthropic Messages replies with tool calls.

It serves `POST /v1/chat/completions`, `POST /v1/responses` and `POST /v1/messages` (each plain
and `stream: true`, in that API's own shapes and events) and `GET /v1/models` on 127.0.0.1
only, and stops by itself after `idle_timeout` seconds without a request. The reply is chosen
by the request's `model`: `script[model]` is a list of replies, and the reply used
is the one at the index of the number of tool results in the request (`tool` messages,
`function_call_output` items, `tool_result` blocks; clamped to the last),
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

__all__ = [
    "StandInModel",
    "completion_chunks",
    "completion_reply",
    "messages_events",
    "messages_reply",
    "responses_events",
    "responses_reply",
]


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _tool_calls(reply: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{prefix}_{i}",
            "type": "function",
            "function": {"name": call["name"], "arguments": _arguments_text(call.get("arguments", {}))},
        }
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
        "id": f"chatcmpl-standin-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}
        ],
        "usage": dict(_USAGE),
    }


def completion_chunks(
    model: str, reply: dict[str, Any], serial: int, *, include_usage: bool = False
) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects OpenAI would stream for a scripted reply: text word by
    word, then each tool call as a header chunk (id, name) and its arguments in three pieces."""
    base = {
        "id": f"chatcmpl-standin-{serial}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    words = (reply.get("content") or "").split(" ")
    out += [chunk({"content": word if i == 0 else " " + word}) for i, word in enumerate(words) if reply.get("content")]
    calls = _tool_calls(reply, str(serial))
    for i, call in enumerate(calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        text = call["function"]["arguments"]
        step = max(1, -(-len(text) // 3))
        out += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": text[j : j + step]}}]})
            for j in range(0, len(text), step)
        ]
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if include_usage:
        out.append({**base, "choices": [], "usage": dict(_USAGE)})
    return out


def _responses_usage() -> dict[str, Any]:
    return {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 30,
    }


def responses_reply(
    model: str, reply: dict[str, Any], serial: int, *, status: str = "completed", output: bool = True
) -> dict[str, Any]:
    """A Responses API `response` object for a scripted reply: a message item with the text, then
    one `function_call` item per call."""
    items: list[dict[str, Any]] = []
    if reply.get("content") and output:
        items.append(
            {
                "type": "message",
                "id": f"msg_{serial}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply["content"], "annotations": [], "logprobs": []}],
            }
        )
    if output:
        items += [
            {
                "type": "function_call",
                "id": f"fc_{serial}_{i}",
                "call_id": f"call_{serial}_{i}",
                "name": call["name"],
                "arguments": _arguments_text(call.get("arguments", {})),
                "status": "completed",
            }
            for i, call in enumerate(reply.get("tool_calls") or [])
        ]
    return {
        "id": f"resp_standin_{serial}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": _responses_usage() if status == "completed" else None,
    }


def responses_events(model: str, reply: dict[str, Any], serial: int) -> list[dict[str, Any]]:
    """The events the Responses API streams for a scripted reply: the message's text word by word,
    then each call as `output_item.added`, its arguments in three deltas, `.done`, `output_item.done`."""
    final = responses_reply(model, reply, serial)
    out: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": responses_reply(model, reply, serial, status="in_progress", output=False),
        },
        {
            "type": "response.in_progress",
            "response": responses_reply(model, reply, serial, status="in_progress", output=False),
        },
    ]
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            part = item["content"][0]
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                }
            )
            out.append({"type": "response.content_part.added", **common, "part": {**part, "text": ""}})
            words = part["text"].split(" ")
            out += [
                {
                    "type": "response.output_text.delta",
                    **common,
                    "delta": word if i == 0 else " " + word,
                    "logprobs": [],
                }
                for i, word in enumerate(words)
            ]
            out.append({"type": "response.output_text.done", **common, "text": part["text"], "logprobs": []})
            out.append({"type": "response.content_part.done", **common, "part": part})
        else:
            text = item["arguments"]
            step = max(1, -(-len(text) // 3))
            common = {"item_id": item["id"], "output_index": index}
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            out += [
                {"type": "response.function_call_arguments.delta", **common, "delta": text[j : j + step]}
                for j in range(0, len(text), step)
            ]
            out.append(
                {"type": "response.function_call_arguments.done", **common, "name": item["name"], "arguments": text}
            )
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    out.append({"type": "response.completed", "response": final})
    return [{**event, "sequence_number": i} for i, event in enumerate(out)]


def messages_reply(model: str, reply: dict[str, Any], serial: int) -> dict[str, Any]:
    """An Anthropic Messages `message` for a scripted reply: a text block, then one `tool_use` block per call."""
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    calls = reply.get("tool_calls") or []
    content += [
        {"type": "tool_use", "id": f"toolu_{serial}_{i}", "name": call["name"], "input": call.get("arguments", {})}
        for i, call in enumerate(calls)
    ]
    return {
        "id": f"msg_standin_{serial}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 10},
    }


def messages_events(model: str, reply: dict[str, Any], serial: int) -> list[dict[str, Any]]:
    """The events Anthropic streams for a scripted reply: text word by word, each `tool_use` block's
    input in three `input_json_delta` parts, then `message_delta` (the stop) and `message_stop`."""
    final = messages_reply(model, reply, serial)
    out: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {**final, "content": [], "stop_reason": None, "usage": {"input_tokens": 20, "output_tokens": 1}},
        },
        {"type": "ping"},
    ]
    for index, block in enumerate(final["content"]):
        if block["type"] == "text":
            out.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
            words = block["text"].split(" ")
            out += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": word if i == 0 else " " + word},
                }
                for i, word in enumerate(words)
            ]
        else:
            text = _arguments_text(block["input"])
            step = max(1, -(-len(text) // 3))
            out.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            out += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": text[j : j + step]},
                }
                for j in range(0, len(text), step)
            ]
        out.append({"type": "content_block_stop", "index": index})
    out.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 10},
        }
    )
    out.append({"type": "message_stop"})
    return out


def _results(body: dict[str, Any], api: str) -> int:
    """How many tool results the request carries: the round of a re-asked model."""
    if api == "chat":
        return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")
    if api == "responses":
        items = body.get("input")
        if not isinstance(items, list):
            return 0
        return sum(1 for item in items if isinstance(item, dict) and item.get("type") == "function_call_output")
    return sum(
        1
        for m in body.get("messages") or []
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for block in m["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )


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

        async def answer(request: Request, api: str) -> Response:
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
            reply = replies[min(_results(body, api), len(replies) - 1)]
            if reply.get("delay"):
                await asyncio.sleep(reply["delay"])
            if "status" in reply:
                error = reply.get("error", {"message": "scripted error"})
                payload = {"type": "error", "error": error} if api == "messages" else {"error": error}
                return JSONResponse(payload, status_code=reply["status"], headers=reply.get("headers"))
            serial = next(self._serial)
            if api == "chat":
                if not body.get("stream"):
                    return Response(orjson.dumps(completion_reply(model, reply, serial)), media_type="application/json")
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                chunks = completion_chunks(model, reply, serial, include_usage=usage)
                frames = [b"data: " + orjson.dumps(item) + b"\n\n" for item in chunks] + [b"data: [DONE]\n\n"]
            else:
                plain, streamed = (
                    (responses_reply, responses_events) if api == "responses" else (messages_reply, messages_events)
                )
                if not body.get("stream"):
                    return Response(orjson.dumps(plain(model, reply, serial)), media_type="application/json")
                frames = [
                    f"event: {item['type']}\ndata: ".encode() + orjson.dumps(item) + b"\n\n"
                    for item in streamed(model, reply, serial)
                ]

            async def events() -> AsyncIterator[bytes]:
                for frame in frames:
                    yield frame
                    if self.chunk_delay:
                        await asyncio.sleep(self.chunk_delay)

            return StreamingResponse(events(), media_type="text/event-stream")

        async def chat(request: Request) -> Response:
            return await answer(request, "chat")

        async def responses(request: Request) -> Response:
            return await answer(request, "responses")

        async def messages(request: Request) -> Response:
            return await answer(request, "messages")

        return Starlette(
            routes=[
                Route("/v1/models", models),
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/messages", messages, methods=["POST"]),
            ]
        )

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
        prog="python -m reflection.testing.upstream",
        description=__doc__.splitlines()[0],
        epilog="It listens on 127.0.0.1 only and prints its base URL (http://127.0.0.1:PORT/v1) on stdout "
        "once it is ready: point the gateway's upstream.base_url (or any OpenAI client) at it. The "
        "reply is chosen by the request's model: the script's reply at the index of the number of "
        "`tool` messages in the request (clamped to the last), so a model re-asked with feedback "
        'gives its next scripted reply; a model not in the script answers the text "ok". Idle exit: '
        "it exits by itself, with status 0, after --idle-timeout seconds without a request, and "
        "prints on stderr how many requests it served; so a forgotten stand-in never outlives its test.",
    )
    parser.add_argument(
        "--script",
        metavar="FILE",
        help='a JSON file {model: [reply, ...]}; a reply is {"content": "text" or null, '
        '"tool_calls": [{"name": ..., "arguments": {...} or "raw text"}]} or an error '
        '{"status": 429, "error": {"message": ...}, "headers": {...}}, and "delay": seconds '
        'makes it slow (default: none, every model answers "ok")',
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
        help="seconds to wait before answering each chat request, as a remote model would (default: %(default)s)",
    )
    parser.add_argument(
        "--chunk-delay",
        type=float,
        default=0.0,
        help="seconds between the chunks of a streamed (`stream: true`) reply (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=120.0,
        help="exit after this many seconds without a request (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    script = json.loads(open(args.script, encoding="utf-8").read()) if args.script else {}  # noqa: SIM115
    server = StandInModel(
        script, latency=args.latency, chunk_delay=args.chunk_delay, idle_timeout=args.idle_timeout, port=args.port
    )

    server.run_in_foreground()
    print(f"served {len(server.requests)} requests", file=sys.stderr)


if __name__ == "__main__":
    main()
