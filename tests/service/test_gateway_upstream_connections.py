"""The gateway's connections to its upstream, as a real process: an upstream that closes a kept-alive
connection just as the gateway reuses it (a keep-alive timeout shorter than the gateway's pool's,
like uvicorn's 5 s) costs a retry on a new connection, not a 502; and the client gets one `Date`."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("fastapi")

from _service_support import ServiceProcess  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
        },
    }
]
REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}


class ClosingUpstream:
    """Answers the first request on each connection and keeps the connection open (HTTP/1.1, no
    `Connection: close`); a later request on it finds it closed, unanswered. Counts both."""

    def __init__(self) -> None:
        self.answered = 0
        self.dropped = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.stop = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def __enter__(self) -> ClosingUpstream:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():  # bounded: the test's lifetime, 0.5 s per wait
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        with conn:
            for number in range(2):
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(body) < length:
                    body += conn.recv(65536)
                if number == 1:
                    self.dropped += 1
                    return  # closed, as a server whose keep-alive timeout just ran out
                content = json.dumps(REPLY).encode()
                self.answered += 1  # before the answer: the test reads it once the gateway has it
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
                    + f"content-length: {len(content)}\r\n\r\n".encode()
                    + content
                )


@pytest.fixture(scope="module")
def upstream():
    with ClosingUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstream):
    server = ServiceProcess(tmp_path_factory.mktemp("closing"), {"upstream": {"base_url": upstream.base_url}}).start()
    yield server
    server.stop()


def test_a_connection_the_upstream_closed_on_reuse_is_retried_on_a_new_one(gateway, upstream):
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        answers = [client.post("/v1/chat/completions", json=body) for _ in range(4)]
    assert [answer.status_code for answer in answers] == [200] * 4, [answer.text for answer in answers]
    assert all(answer.json()["reflection"]["actions"] == ["allow"] for answer in answers)
    assert upstream.answered == 4 and upstream.dropped >= 1  # the pooled connection was reused, and dropped


def test_the_client_gets_one_date_the_gateways_own(gateway):
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200
    assert len(answer.headers.get_list("date")) == 1
    assert answer.headers["date"] != "Thu, 01 Jan 2026 00:00:00 GMT"
