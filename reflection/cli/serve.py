"""The `reflection serve` and `reflection mcp-proxy` commands: options in, library calls out.

`reflection.cli` registers them; they import the service stack only when run, so the rest of the
CLI works without the `service` extra. Each of uvicorn's workers builds its application with
`reflection.service._worker.app_from_env`, which reads the config through `reflection.config`:
a worker never imports the CLI.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import tempfile
from pathlib import Path

import typer

from reflection.cli.common import fail

__all__ = ["mcp_proxy", "serve"]


def _load(config: Path | None):
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
        raise fail(
            f"the service needs the 'service' extra: pip install \"toolcall-reflection[service]\" ({exc})"
        ) from None


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
    config: Path | None = typer.Option(
        None, "--config", exists=True, dir_okay=False, help="YAML config (service:, upstream:, judge:, gate:)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port (0: any free port)."),
    workers: int = typer.Option(
        1, "--workers", min=1, help="Worker processes (each with its own judge pool and cache)."
    ),
    insecure_no_auth: bool = typer.Option(False, "--insecure-no-auth", help="Listen beyond loopback without API keys."),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
) -> None:
    """Run the reflection service: /v1/reflect, /v1/check, /v1/gate, the LiteLLM guardrail, the
    OpenAI-compatible gateway (/v1/chat/completions), /healthz, /readyz and /metrics."""
    _require_service_extra()
    import uvicorn

    from reflection.service._logging import log_config, request_logger
    from reflection.service._worker import APP_FACTORY, CONFIG_ENV, guarded_protocol

    cfg = _load(config)
    if not cfg.service.key_tenants() and not _is_loopback(host) and not insecure_no_auth:
        raise fail(
            f"no API keys configured (service.api_keys, service.tenants or REFLECTION_SERVICE__API_KEYS), so the service "
            f"listens only on loopback; refusing --host {host}. Configure keys, or pass --insecure-no-auth."
        )
    if port == 0:
        port = _free_port(host)
    os.environ[CONFIG_ENV] = str(config.resolve()) if config else ""
    metrics_dir = None
    if workers > 1:
        metrics_dir = tempfile.mkdtemp(prefix="reflection-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    import logging.config

    logging.config.dictConfig(log_config(log_level))
    shown = f"[{host}]" if ":" in host else host
    protocol = guarded_protocol()
    if protocol is None:
        request_logger.warning(
            "httptools is not installed: connections get uvicorn's keep-alive timeout only, no "
            'header time or size limit and no connection cap; install "toolcall-reflection[service]"'
        )
    service = cfg.service
    request_logger.info(f"serving on http://{shown}:{port} with {workers} worker(s)", extra={"event": "listening"})
    try:
        # Not `limit_concurrency`: it counts idle connections too, so hoarded ones would refuse
        # every real request; the protocol caps connections and the middleware caps requests.
        server_config = uvicorn.Config(
            APP_FACTORY,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=log_config(log_level),
            access_log=False,
            server_header=False,
            http=protocol or "auto",
            timeout_keep_alive=service.keep_alive_seconds,
            # Draining waits for the longest request: its body's time, then its deadline.
            timeout_graceful_shutdown=int(service.body_timeout_seconds + service.deadline_seconds) + 1,
            backlog=2048,
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


_MCP_CONFIG_ENV = "REFLECTION_MCP_PROXY_CONFIG"
"""The config file of `reflection mcp-proxy` when --config is not given: for clients that take
`--config` themselves (the MCP Inspector does), so it cannot be passed on the command line."""


def _listen_address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise fail(f"--listen takes HOST:PORT (e.g. 127.0.0.1:8931), not {value!r}")
    return host, int(port)


def _header(value: str) -> tuple[str, str]:
    name, sep, content = value.partition(":")
    if not sep or not name.strip():
        raise fail(f"--header takes 'Name: value', not {value!r}")
    return name.strip(), content.strip()


def mcp_proxy(
    command: list[str] | None = typer.Argument(None, help="The MCP server to run, after --: COMMAND ARGS..."),
    config: Path | None = typer.Option(
        None,
        "--config",
        exists=True,
        dir_okay=False,
        envvar=_MCP_CONFIG_ENV,
        help=f"YAML config (judge:, gate:); or set {_MCP_CONFIG_ENV}.",
    ),
    url: str | None = typer.Option(None, "--url", help="A remote MCP server over streamable HTTP, instead of COMMAND."),
    header: list[str] | None = typer.Option(
        None, "--header", help="'Name: value' sent to --url with every request (repeatable)."
    ),
    listen: str | None = typer.Option(
        None, "--listen", help="Serve clients over streamable HTTP at http://HOST:PORT/mcp instead of stdio."
    ),
    insecure_no_auth: bool = typer.Option(
        False, "--insecure-no-auth", help="Let --listen use an address beyond loopback (no authentication)."
    ),
    request_timeout: float = typer.Option(
        30.0,
        "--request-timeout",
        min=0.1,
        help="Seconds to wait for the server's answer to the proxy's own tools/list.",
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
) -> None:
    """Front an MCP server (a COMMAND run over stdio, or --url over streamable HTTP) for clients on
    stdio (or --listen over streamable HTTP): every tools/call is checked; a refused call is
    answered with an MCP tool error whose text is the feedback, a corrected one runs with a note
    saying what was corrected. Everything else passes through. On stdio it exits when stdin
    ends, on SIGINT or SIGTERM, stopping the server; the exit code is the server's when it failed
    by itself."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise fail(
            f"the MCP proxy needs the 'service' extra: pip install \"toolcall-reflection[service]\" ({exc})"
        ) from None
    import logging.config

    import anyio

    from reflection.service._logging import log_config
    from reflection.service.mcp_proxy import run_proxy

    if not command and not url:
        raise fail("no MCP server given: reflection mcp-proxy -- COMMAND ARGS..., or --url URL")
    if command and url:
        raise fail("give the MCP server as a command or as --url, not both")
    address = _listen_address(listen) if listen else None
    if address and not _is_loopback(address[0]) and not insecure_no_auth:
        raise fail(
            f"the MCP proxy has no authentication, so --listen takes a loopback address; refusing {address[0]}. "
            "Put it behind an authenticating proxy and pass --insecure-no-auth."
        )
    headers = dict(_header(h) for h in header or ())
    cfg = _load(config)
    logging.config.dictConfig(log_config(log_level))
    try:
        code = anyio.run(
            lambda: run_proxy(
                command or [], cfg, url=url, headers=headers or None, listen=address, request_timeout=request_timeout
            )
        )
    except OSError as exc:
        what = repr(command[0]) if command else repr(url)
        raise fail(f"cannot start the MCP server {what}: {exc}") from None
    raise typer.Exit(code)
