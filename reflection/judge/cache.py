"""Judge reply caches: what `JudgeCache` asks of one, `SQLiteJudgeCache` on disk (batch runs,
SQLite through aiosqlite) and `MemoryJudgeCache` in memory (a gate answering live traffic).

Keys come from `reflection.judge.request_key` (a hash of model, endpoint, prompt-template
version, messages and reply schema); values are the judge's validated JSON replies. Only
answers that passed validation are stored, so a failed request is asked again next time.

The SQLite cache is an optimisation, so it never stops a run: when the file cannot be opened,
read or written (a corrupt file, a full disk, no permission) it logs one warning naming the
file and the cause, and from then on every lookup misses and nothing is stored. aiosqlite is
imported when such a cache first opens its file, so a gate's memory cache never loads it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from reflection._json import dumps, parse_json
from reflection._lru import LRU

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["JudgeCache", "MemoryJudgeCache", "SQLiteJudgeCache"]

logger = logging.getLogger("reflection.cache")

_CORRUPT = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})

_SCHEMA = "CREATE TABLE IF NOT EXISTS judge_replies (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"


class JudgeCache(Protocol):
    """Stores raw validated replies keyed by request content (see `reflection.batch`)."""

    async def get(self, key: str) -> Any | None: ...

    async def put(self, key: str, value: Any) -> None: ...


class MemoryJudgeCache:
    """Judge replies in memory, least recently used evicted past `max_entries`: for a gate
    answering live traffic, where the same call and conversation often come back (retries,
    re-asked turns). Keys as `SQLiteJudgeCache` (`reflection.judge.request_key`)."""

    def __init__(self, max_entries: int = 1024):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._replies = LRU(max_entries, static_stage=False)
        # A gate's blocking path runs on its own thread and shares this cache.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._replies)

    async def get(self, key: str) -> Any | None:
        """The stored reply for `key`, or None."""
        with self._lock:
            value = self._replies.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            return value

    async def put(self, key: str, value: Any) -> None:
        """Store a validated reply under `key`, evicting the least recently used past the bound."""
        with self._lock:
            self._replies.put(key, value)


class SQLiteJudgeCache:
    """Judge replies in a SQLite file: one connection, WAL mode.

    Writes are buffered and committed `write_batch` at a time (and on close): each trip to
    aiosqlite's thread costs the event loop real CPU, and a crash only loses replies that
    will be asked again. Reads see buffered writes. WAL lets several processes (e.g. Ray
    actors on one node) share the file. Use it as an async context manager, or call
    `aclose()`; it opens on first use. `hits`, `misses` and `writes` count this object's traffic.
    `failure` says why the cache was turned off (see the module docstring), else None.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0, write_batch: int = 64):
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.write_batch = max(1, write_batch)
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self._db: aiosqlite.Connection | None = None
        self._opening: anyio.Lock | None = None
        self._flushing: anyio.Lock | None = None
        self._pending: dict[str, str] = {}
        self.failure: str | None = None

    def _fail(self, exc: BaseException) -> None:
        """Turn the cache off for the rest of this object's life, with one warning."""
        if self.failure is not None:
            return
        self._pending = {}
        code = getattr(exc, "sqlite_errorcode", None)
        corrupt = isinstance(code, int) and (code & 0xFF) in _CORRUPT
        self.failure = f"{type(exc).__name__}: {exc}"
        advice = (
            "the file is corrupt: delete it (or choose another cache path) to cache again"
            if corrupt
            else "the file is kept as it is"
        )
        logger.warning("judge cache %s: %s; carrying on without the cache (%s)", self.path, self.failure, advice)

    async def __aenter__(self) -> SQLiteJudgeCache:
        try:
            await self._connection()
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _connection(self) -> aiosqlite.Connection:
        if self._db is not None:
            return self._db
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._db is None:
                import aiosqlite

                self.path.parent.mkdir(parents=True, exist_ok=True)
                # isolation_level=None: no implicit transactions; flush() opens its own.
                db = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
                try:
                    await db.execute("PRAGMA journal_mode=WAL")
                    await db.execute("PRAGMA synchronous=NORMAL")
                    await db.execute(_SCHEMA)
                except BaseException:
                    await db.close()
                    raise
                self._db = db
        return self._db

    async def get(self, key: str) -> Any | None:
        """The stored reply for `key`, or None (also when the cache is off)."""
        if self.failure is not None:
            self.misses += 1
            return None
        if key in self._pending:
            self.hits += 1
            return parse_json(self._pending[key])
        try:
            db = await self._connection()
            async with db.execute("SELECT value FROM judge_replies WHERE key = ?", (key,)) as cursor:
                found = await cursor.fetchone()
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
            found = None
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        return parse_json(found[0])

    async def put(self, key: str, value: Any) -> None:
        """Store a validated reply under `key` (replacing any older one); nothing when the cache is off."""
        if self.failure is not None:
            return
        self._pending[key] = dumps(value)
        self.writes += 1
        if len(self._pending) >= self.write_batch:
            await self.flush()

    async def flush(self) -> None:
        """Commit the buffered writes in one transaction (dropped, with the warning, if that fails)."""
        if not self._pending or self.failure is not None:
            return
        try:
            await self._commit()
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)

    async def _commit(self) -> None:
        db = await self._connection()
        if self._flushing is None:
            self._flushing = anyio.Lock()
        async with self._flushing:
            batch, self._pending = self._pending, {}
            if not batch:
                return
            now = time.time()
            await db.execute("BEGIN")
            try:
                await db.executemany(
                    "INSERT OR REPLACE INTO judge_replies (key, value, created) VALUES (?, ?, ?)",
                    [(key, value, now) for key, value in batch.items()],
                )
                await db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    await db.execute("ROLLBACK")
                raise

    async def count(self) -> int:
        """How many replies are stored (raises if the file cannot be read)."""
        await self.flush()
        db = await self._connection()
        async with db.execute("SELECT COUNT(*) FROM judge_replies") as cursor:
            found = await cursor.fetchone()
        return int(found[0]) if found else 0

    async def aclose(self) -> None:
        """Commit buffered writes and close the connection (idempotent)."""
        if self._db is None and not self._pending:
            return
        try:
            await self.flush()
        finally:
            if self._db is not None:
                db, self._db = self._db, None
                try:
                    await db.close()
                except (sqlite3.Error, OSError) as exc:
                    self._fail(exc)
