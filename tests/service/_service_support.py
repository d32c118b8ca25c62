"""Helpers for the service tests: `reflection serve` as a real subprocess on 127.0.0.1."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast for a city.",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            },
        },
    }
]
HISTORY = [{"role": "user", "content": "What's the weather in Paris for the next 2 days?"}]

_CLI = "from reflection.cli import app; app()"


def _die_with_parent() -> None:
    """Linux: SIGTERM the server when the test process dies, so none outlives a crashed run."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ServiceProcess:
    """`reflection serve --port 0` with a YAML config, run until `stop()`; stderr (the JSON log) in a file."""

    def __init__(self, tmp: Path, config: dict[str, Any], *args: str, env: dict[str, str] | None = None):
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.config_path = tmp / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log_path = tmp / "service.log"
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")} | (env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def command(self) -> list[str]:
        """The command line."""
        return [sys.executable, "-c", _CLI, "serve", "--config", str(self.config_path), "--port", "0", *self.args]

    def start(self) -> ServiceProcess:
        """Start and wait until /healthz answers (60 s at most: the machine may be shared and busy)."""
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=self.env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"reflection serve exited with {self.process.returncode}:\n{self.log()}")
            match = re.search(r"serving on (http://127\.0\.0\.1:\d+)", self.log())
            if match:
                self.url = match.group(1)
                try:
                    if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"reflection serve did not become healthy within 60 s:\n{self.log()}")

    def log(self) -> str:
        """Everything the server wrote to stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def terminate(self) -> None:
        """Send SIGTERM to the server."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM, then wait (SIGKILL after 15 s); the exit code."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.terminate()
        try:
            return self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)


def wait_in_flight(url: str, count: int, timeout: float = 30) -> None:
    """Wait until the service at `url` reports at least `count` requests in flight (its /metrics)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
            if line.startswith("reflection_http_in_flight ") and float(line.split()[1]) >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} requests in flight after {timeout} s")
