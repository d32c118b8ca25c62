"""`reflection serve`: the reflection service, an OpenAI-compatible gateway, and an MCP proxy.

Needs the `service` extra (`pip install "toolcall-reflection[service]"`: FastAPI, uvicorn, the Prometheus
client and the MCP SDK). `create_app(config)` is the ASGI application `reflection serve` runs;
`reflection.service.mcp_proxy.run_proxy` is what `reflection mcp-proxy` runs. Importing this
package is light: the service stack loads on first use of `create_app`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from reflection.service.app import create_app

        return create_app
    raise AttributeError(f"module 'reflection.service' has no attribute {name!r}")
