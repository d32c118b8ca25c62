"""Sharing the event loop during long work.

A service worker serves every client from one event loop, so a large request (a turn of a
thousand calls, its thousand decisions to write) must hand the loop back often, or every other
client waits for it: `Slices.tick` returns to the loop once the work since the last return has
run `SLICE_SECONDS`. By time, not by a count of items: a slice of 16 decisions took 2.5-4 ms of
CPU (bench_attack.py's 1,024-call arm), and the other clients' requests, each needing a few turns
of the loop, waited a slice per turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import anyio.lowlevel

__all__ = ["SLICE_SECONDS", "Slices", "let_go", "mapped"]

SLICE_SECONDS = 0.0005
"""How long a slice of work runs before the event loop gets a turn (a return costs 2-4 us)."""

_now = time.perf_counter


class Slices:
    """`await slices.tick()` between items of a long loop: it returns to the event loop when this
    slice has run `SLICE_SECONDS`, and starts the next slice."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = _now()

    async def tick(self) -> None:
        if _now() - self._since >= SLICE_SECONDS:
            await anyio.lowlevel.checkpoint()
            self._since = _now()


_T = TypeVar("_T")


async def mapped(items: Iterable[Any], do: Callable[[Any], _T]) -> list[_T]:
    """`[do(item) for item in items]`, in `Slices`."""
    out = []
    slices = Slices()
    for item in items:
        out.append(do(item))
        await slices.tick()
    return out


async def let_go(held: list[Any] | bytearray) -> None:
    """Empty a large buffer a piece at a time, in `Slices`: freed at once, 64 MB (a bytearray's
    one mapping, or a list of the chunks read) held the event loop 2-3 ms. A bytearray gives its
    memory back as it halves (CPython shrinks its allocation below half its size)."""
    slices = Slices()
    if isinstance(held, bytearray):
        while len(held) > _PIECE:
            del held[len(held) // 2 :]
            await slices.tick()
        held.clear()
        return
    while held:
        held.pop()
        await slices.tick()


_PIECE = 1 << 20
