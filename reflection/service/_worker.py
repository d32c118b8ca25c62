"""The application of each worker process `reflection serve` starts (uvicorn's factory,
`APP_FACTORY`), and the HTTP protocol the workers speak.

`reflection serve` (`reflection.cli.serve`) names its config file in `CONFIG_ENV`; each worker
reads it through `reflection.config` and builds its application here, so a worker process never
imports the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reflection._gc import settle_long_lived

__all__ = ["APP_FACTORY", "CONFIG_ENV", "GUARDED_PROTOCOL", "app_from_env", "guarded_protocol"]

CONFIG_ENV = "REFLECTION_SERVE_CONFIG"
"""How `reflection serve` tells its worker processes which config file to load."""

APP_FACTORY = "reflection.service._worker:app_from_env"
"""`app_from_env`, as uvicorn's `factory=True` application string names it."""

GUARDED_PROTOCOL = "reflection.service._connections:GuardedHttpToolsProtocol"
"""The HTTP protocol with header limits and a connection cap (needs httptools)."""


def app_from_env() -> Any:
    """The application of one worker process: the config file named by REFLECTION_SERVE_CONFIG
    (if any), with the environment on top. Used by `reflection serve` as uvicorn's factory."""
    from reflection.config import load_config
    from reflection.service.app import create_app

    path = os.environ.get(CONFIG_ENV)
    cfg = load_config(Path(path) if path else None)
    app = create_app(cfg)
    if guarded_protocol() is not None:  # this worker's connection limits, from the same config
        from reflection.service import _connections

        _connections.configure(cfg.service, getattr(app, "metrics", None))
    # A worker serves from here on: what it holds leaves the collector's sight, and full
    # collections come seldom (a large request set off 25-30 ms ones, every other client waiting).
    settle_long_lived()
    return app


def guarded_protocol() -> str | None:
    """The HTTP protocol with header limits and a connection cap, or None without httptools."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return None
    return GUARDED_PROTOCOL
