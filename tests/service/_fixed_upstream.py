"""An upstream for the gateway's tests that answers every POST with one fixed body: shapes and event
streams the cooperative stand-in never sends (hostile or merely odd), on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FixedUpstream:
    """`with FixedUpstream(reply) as base_url:` every POST gets `reply` (a JSON value, or bytes sent
    as they are with `content_type`); the request bodies are kept in `requests`."""

    def __init__(self, reply: Any, *, content_type: str = "application/json", status: int = 200):
        self.body = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
        self.content_type = content_type
        self.status = status
        self.requests: list[bytes] = []

    def __enter__(self) -> str:
        fixed = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                fixed.requests.append(self.rfile.read(int(self.headers.get("content-length") or 0)))
                self.send_response(fixed.status)
                self.send_header("content-type", fixed.content_type)
                self.send_header("content-length", str(len(fixed.body)))
                self.end_headers()
                self.wfile.write(fixed.body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def sse(*events: Any) -> bytes:
    """Events as an SSE body: dicts with a `type` get an `event:` line; bytes are sent as they are."""
    out = b""
    for event in events:
        if isinstance(event, bytes):
            out += event
        else:
            out += f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
    return out


class ByModelUpstream(FixedUpstream):
    """`FixedUpstream` whose answer is chosen by the request's `model`: `replies[model]` is the SSE
    body (bytes) or JSON reply for it; a model not listed gets HTTP 400."""

    def __init__(self, replies: dict[str, Any]):
        super().__init__(b"")
        self.replies = {k: v if isinstance(v, bytes) else json.dumps(v).encode() for k, v in replies.items()}

    def __enter__(self) -> str:
        fixed = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                fixed.requests.append(raw)
                model = str(json.loads(raw).get("model"))
                body = fixed.replies.get(model)
                self.send_response(200 if body is not None else 400)
                streamed = body is not None and not body.lstrip().startswith(b"{")
                self.send_header("content-type", "text/event-stream" if streamed else "application/json")
                body = body if body is not None else b'{"error": {"message": "unknown model"}}'
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"
