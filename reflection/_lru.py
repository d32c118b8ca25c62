"""Bounded least-recently-used caches for the static stage's per-content work.

A large evaluation file repeats its tool lists and schemas in no particular order; a cache
smaller than that working set, or one that evicts in arrival order, recompiles the same
schema again and again. These caches keep the most recently used entries and evict the
least recently used one when full, so a working set below the size always hits.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["DEFAULT_SIZE", "LRU", "set_cache_size"]

DEFAULT_SIZE = 16_384
"""Entries per cache: above the distinct tool lists and schemas of BFCL as a whole (about
9,400 tool lists in four spec formats and 3,000 schemas). `reflection check` on 50,000
BFCL-derived rows peaks at about 100 MB RSS; the worst case, every row bringing five
never-seen schemas until every cache is full, peaks near 950 MB (bench_static.py's memory
line). `set_cache_size` trades that memory for speed."""

_ALL: list[LRU] = []


class LRU:
    """An `OrderedDict`-backed LRU cache: `get` refreshes an entry, `put` evicts the stalest when
    full. (A plain dict evicting its first key slowed as evictions left holes at its front for
    the next search to skip: 2.0 against 0.4 us an operation at 16,384 entries with a working set
    three times that.)"""

    __slots__ = ("data", "size")

    def __init__(self, size: int = DEFAULT_SIZE, *, static_stage: bool = True):
        """`static_stage`: one of the caches `set_cache_size` resizes."""
        self.data: OrderedDict[Any, Any] = OrderedDict()
        self.size = size
        if static_stage:
            _ALL.append(self)

    def get(self, key: Any) -> Any:
        """The cached value, or None; a hit becomes the most recently used entry."""
        data = self.data
        try:
            data.move_to_end(key)
        except KeyError:
            return None
        return data[key]

    def put(self, key: Any, value: Any) -> None:
        """Cache `value`, evicting the least recently used entries beyond the size."""
        data = self.data
        data[key] = value
        data.move_to_end(key)
        while len(data) > self.size:
            data.popitem(last=False)

    def __len__(self) -> int:
        return len(self.data)

    def clear(self) -> None:
        self.data.clear()


def set_cache_size(entries: int) -> None:
    """Resize every static-stage cache (tool lists, prepared inventories, compiled schemas).

    Size them above the distinct tool lists of the files you check: a file whose working set
    is larger recompiles schemas on every pass. Memory grows with the entries kept: up to
    about 60 KB per cached five-tool list (its texts, inventory and compiled validators).
    """
    if entries < 1:
        raise ValueError(f"cache size must be at least 1, got {entries}")
    for cache in _ALL:
        cache.size = entries
        while len(cache.data) > entries:
            cache.data.popitem(last=False)
