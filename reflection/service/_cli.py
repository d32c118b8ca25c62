"""The `reflection serve` and `reflection mcp-proxy` commands: options in, library calls out.

`reflection.cli` registers them; they import the service stack only when run, so the rest of the
CLI works without the `service` extra.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import tempfile
from pathlib import Path

import typer

from reflection._cli_common import fail

__all__ = ["app_from_env", "mcp_proxy", "serve"]

_CONFIG_ENV = "REFLECTION_SERVE_CONFIG"
"""How `reflection serve` tells its worker processes which config file to load."""


def _load(config: Path | None):  # noqa: ANN202 - ReflectionConfig, imported late
    from reflection.config import load_config

    try:
        return load_config(config)
    except ValueError as exc:  # ConfigError: one line saying what is wrong and where
        raise fail(str(exc)) from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _require_service_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise fail(f"the service needs the 'service' extra: pip install \"reflection[service]\" ({exc})") from None


def app_from_env():  # noqa: ANN201 - an ASGI app
    """The application of one worker process: the config file named by REFLECTION_SERVE_CONFIG
    (if any), with the environment on top. Used by `reflection serve` as uvicorn's factory."""
    from reflection.cli import load_config
    from reflection.service.app import create_app

    path = os.environ.get(_CONFIG_ENV)
    cfg = load_config(Path(path) if path else None)
    app = create_app(cfg)
    if _guarded_protocol() is not None:  # this worker's connection limits, from the same config
        from reflection.service import _connections

        _connections.configure(cfg.service, getattr(app, "metrics", None))
    return app


_GUARDED_PROTOCOL = "reflection.service._connections:GuardedHttpToolsProtocol"


def _guarded_protocol() -> str | None:
    """The HTTP protocol with header limits and a connection cap, or None without httptools."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return None
    return _GUARDED_PROTOCOL


def _drain_refusing_supervisor() -> type:
    """uvicorn's supervisor of several workers, closing its own copy of the listening socket before
    it asks the workers to drain. Each worker closes its copy when SIGTERM starts its drain, but the
    supervisor's kept the socket listening: new connections were queued in the kernel with no one
    left to accept them, and hung. With every copy closed they are refused at once."""
    from uvicorn.supervisors.multiprocess import Multiprocess

    class DrainRefusingMultiprocess(Multiprocess):
        def terminate_all(self) -> None:
            for sock in self.sockets:
                sock.close()
            super().terminate_all()

    return DrainRefusingMultiprocess


def serve(
    config: Path | None = typer.Option(None, "--config", exists=True, dir_okay=False, help="YAML config (service:, upstream:, judge:, gate:)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port (0: any free port)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Worker processes (each with its own judge pool and cache)."),
    insecure_no_auth: bool = typer.Option(False, "--insecure-no-auth", help="Listen beyond loopback without API keys."),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
) -> None:
    """Run the reflection service: /v1/reflect, /v1/check, /v1/gate, the LiteLLM guardrail, the
    OpenAI-compatible gateway (/v1/chat/completions), /healthz, /readyz and /metrics."""
    _require_service_extra()
    import uvicorn

    from reflection.service._logging import log_config, request_logger

    cfg = _load(config)
    if not cfg.service.api_keys and not _is_loopback(host) and not insecure_no_auth:
        raise fail(f"no API keys configured (service.api_keys or REFLECTION_SERVICE__API_KEYS), so the service "
                    f"listens only on loopback; refusing --host {host}. Configure keys, or pass --insecure-no-auth.")
    if port == 0:
        port = _free_port(host)
    os.environ[_CONFIG_ENV] = str(config.resolve()) if config else ""
    metrics_dir = None
    if workers > 1:
        metrics_dir = tempfile.mkdtemp(prefix="reflection-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    import logging.config

    logging.config.dictConfig(log_config(log_level))
    shown = f"[{host}]" if ":" in host else host
    protocol = _guarded_protocol()
    if protocol is None:
        request_logger.warning("httptools is not installed: connections get uvicorn's keep-alive timeout only, no "
                               "header time or size limit and no connection cap; install \"reflection[service]\"")
    service = cfg.service
    request_logger.info(f"serving on http://{shown}:{port} with {workers} worker(s)", extra={"event": "listening"})
    try:
        # Not `limit_concurrency`: it counts idle connections too, so hoarded ones would refuse
        # every real request; the protocol caps connections and the middleware caps requests.
        server_config = uvicorn.Config(
            "reflection.service._cli:app_from_env", factory=True, host=host, port=port, workers=workers,
            log_config=log_config(log_level), access_log=False, server_header=False, http=protocol or "auto",
            timeout_keep_alive=service.keep_alive_seconds,
            # Draining waits for the longest request: its body's time, then its deadline.
            timeout_graceful_shutdown=int(service.body_timeout_seconds + service.deadline_seconds) + 1, backlog=2048,
        )
        if workers > 1:
            _drain_refusing_supervisor()(server_config, sockets=[server_config.bind_socket()]).run()
        else:
            server = uvicorn.Server(server_config)
            server.run()
            if not server.started:
                raise typer.Exit(3)  # uvicorn's STARTUP_FAILURE; uvicorn.run exits with it too
    except KeyboardInterrupt:
        pass
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def mcp_proxy(
    command: list[str] = typer.Argument(..., help="The MCP server to run, after --: COMMAND ARGS..."),
    config: Path | None = typer.Option(None, "--config", exists=True, dir_okay=False, help="YAML config (judge:, gate:)."),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
) -> None:
    """Front an MCP server run over stdio: every tools/call is checked; a refused call is answered
    with an MCP tool error whose text is the feedback. Everything else passes through."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise fail(f"the MCP proxy needs the 'service' extra: pip install \"reflection[service]\" ({exc})") from None
    import logging.config

    import anyio

    from reflection.service._logging import log_config
    from reflection.service.mcp_proxy import run_proxy

    cfg = _load(config)
    logging.config.dictConfig(log_config(log_level))
    try:
        anyio.run(run_proxy, command, cfg)
    except OSError as exc:
        raise fail(f"cannot start the MCP server {command[0]!r}: {exc}") from None
