"""The application of each worker process `reflection serve` starts (uvicorn's factory,
`APP_FACTORY`), and the HTTP protocol the workers speak.

`reflection serve` (`reflection.cli.serve`) names its config file in `CONFIG_ENV`; each worker
reads it through `reflection.config` and builds its application here, so a worker process never
imports the CLI.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

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
    # Everything a worker holds from here on (modules, the app, its schemas) lives as long as the
    # process: out of the cyclic collector's sight, a full collection walks only what requests
    # left behind. Without it, the full collections a 1,024-call request sets off walked it all:
    # 25-30 ms in one block, every other client waiting (bench_attack.py's 1024-calls arm).
    gc.freeze()
    return app


def guarded_protocol() -> str | None:
    """The HTTP protocol with header limits and a connection cap, or None without httptools."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return None
    return GUARDED_PROTOCOL
