"""The cyclic garbage collector's settings for long runs that hold large caches.

A static run or a service worker allocates millions of short-lived containers that form no
cycles (parsed rows and requests, results) while its caches (compiled validators, normalised
tool lists) hold hundreds of thousands of long-lived ones, which every full collection walks
again. With the default thresholds (700, 10, 10) collection took a tenth of the CPU of
`reflection check` on bench_static's mixed corpus, and in the service a large request set off
full collections of 25-30 ms in one block (bench_attack.py).
"""

from __future__ import annotations

import atexit
import functools
import gc

__all__ = ["CACHE_HEAVY_THRESHOLD", "freeze_at_exit", "settle_long_lived"]

CACHE_HEAVY_THRESHOLD = (10_000, 50, 1_000)
"""Thresholds for runs that hold large caches: young collections still run (cycles are still
freed), full collections seldom."""


def settle_long_lived() -> None:
    """For a process that serves from here on (a service worker after start-up): what it holds
    now (modules, the application, its schemas) lives as long as the process, so it leaves the
    collector's sight (`gc.freeze`), and `CACHE_HEAVY_THRESHOLD` applies."""
    gc.freeze()
    gc.set_threshold(*CACHE_HEAVY_THRESHOLD)


@functools.cache  # registered once
def freeze_at_exit() -> None:
    """For a run whose caches end with the process (a static `reflection check`): at exit, what
    they hold leaves the collector's sight, so the interpreter does not walk it in each of its last
    collections (0.3 s after 20,000 mixed rows in one process)."""
    atexit.register(gc.freeze)
