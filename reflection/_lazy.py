"""Package attributes that load on first use (PEP 562), so importing a package stays cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_attributes(
    package: str, homes: Mapping[str, str], names: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: each name in `homes` is imported from its
    module the first time it is looked up, then stored on the package (later lookups are plain
    attribute reads); `dir()` lists `names` too. Use:

        __getattr__, __dir__ = lazy_attributes(__name__, _HOMES, __all__)
    """
    module = sys.modules[package]
    listed = set(names)

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *listed})

    return __getattr__, __dir__
