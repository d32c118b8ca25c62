"""The gateway's connections to its upstream, as a real process: an upstream that closes a kept-alive
connection just as the gateway reuses it (a keep-alive timeout shorter than the gateway's pool's,
like uvicorn's 5 s) costs a retry on a new connection, not a 502; the client gets one `Date`; and
`upstream.max_response_bytes` holds for a declared length (refused before the body is read) and
for a compressed body (counted decoded)."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from typing import Self

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


class SocketUpstream:
    """A loopback upstream on raw sockets, each connection served by `_serve` on a thread of its own."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.stop = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def __enter__(self) -> Self:
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
            conn.settimeout(30)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    @staticmethod
    def read_request(conn: socket.socket) -> bool:
        """Read one request, head and body; False when the connection ended first."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += conn.recv(65536)
        return True


class ClosingUpstream(SocketUpstream):
    """Answers the first request on each connection and keeps the connection open (HTTP/1.1, no
    `Connection: close`); a later request on it finds it closed, unanswered. Counts both."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = 0
        self.dropped = 0

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            if not self.read_request(conn):
                return
            content = json.dumps(REPLY).encode()
            self.answered += 1  # before the answer: the test reads it once the gateway has it
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
                + f"content-length: {len(content)}\r\n\r\n".encode()
                + content
            )
            if self.read_request(conn):
                self.dropped += 1  # closed unanswered, as a server whose keep-alive timeout just ran out


@pytest.fixture(scope="module")
def upstream():
    with ClosingUpstream() as server:
        yield server


def _serving(tmp_path_factory, name: str, upstream: dict):
    """A `reflection serve` process with this `upstream` config, stopped after the module."""
    server = ServiceProcess(tmp_path_factory.mktemp(name), {"upstream": upstream}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstream):
    yield from _serving(tmp_path_factory, "closing", {"base_url": upstream.base_url})


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


# --- upstream.max_response_bytes: declared lengths and compressed bodies ----------------------------

MAX_BYTES = 1024 * 1024


class SizedUpstream(SocketUpstream):
    """Answers every request of a connection as `mode` says: "declared" sends headers declaring a
    body of 1 GiB, a few bytes of it, then nothing until the gateway closes the connection (30 s at
    most); "bomb" sends a gzip body of 40 KB declared as such, a completion that decodes to 40 MiB."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "declared"
        self.closed_early = 0
        content = dict(
            REPLY,
            choices=[{**REPLY["choices"][0], "message": {"role": "assistant", "content": "x" * (40 * MAX_BYTES)}}],
        )
        self.bomb = gzip.compress(json.dumps(content).encode(), compresslevel=9)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while self.read_request(conn):  # bounded: 30 s per read
                if self.mode == "bomb":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                        + f"content-length: {len(self.bomb)}\r\n\r\n".encode()
                        + self.bomb
                    )
                    continue
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {1 << 30}\r\n\r\n".encode()
                    + b'{"id": "'
                )
                try:
                    closed = conn.recv(1) == b""  # waits: the rest of the body never comes
                except OSError:
                    closed = True
                self.closed_early += closed
                return


@pytest.fixture(scope="module")
def sized():
    with SizedUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def capped_gateway(tmp_path_factory, sized):
    config = {"base_url": sized.base_url, "max_response_bytes": MAX_BYTES, "timeout": 120}
    yield from _serving(tmp_path_factory, "capped", config)


def test_a_declared_length_past_the_cap_is_refused_before_its_body_is_read(capped_gateway, sized):
    # The body never comes: a gateway that read it to count would wait for upstream.timeout (120 s),
    # past this client's 20 s. It answers at once and closes that connection.
    sized.mode = "declared"
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    answer = httpx.post(capped_gateway.url + "/v1/chat/completions", json=body, timeout=20)
    assert answer.status_code == 502 and "max_response_bytes" in answer.json()["detail"], answer.text
    deadline = time.monotonic() + 20
    while sized.closed_early == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sized.closed_early == 1


def test_a_compressed_body_is_held_to_the_cap_once_decoded(capped_gateway, sized):
    # 40 KB on the wire, declared as such, 40 MiB decoded: the cap counts what the body decodes to.
    sized.mode = "bomb"
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    answer = httpx.post(capped_gateway.url + "/v1/chat/completions", json=body, timeout=20)
    assert answer.status_code == 502 and "max_response_bytes" in answer.json()["detail"], answer.text[:300]
