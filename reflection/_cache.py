"""The judge cache on disk: SQLite through aiosqlite, implementing `reflection.judge.JudgeCache`.

Keys come from `reflection.judge.request_key` (a hash of model, endpoint, prompt-template
version, messages and reply schema); values are the judge's validated JSON replies. Only
answers that passed validation are stored, so a failed request is asked again next time.
"""

from __future__ import annotations

import sqlite3
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

from reflection._json import dumps, parse_json

__all__ = ["MemoryJudgeCache", "SQLiteJudgeCache"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS judge_replies (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"


class SQLiteJudgeCache:
    """Judge replies in a SQLite file: one connection, WAL mode.

    Writes are buffered and committed `write_batch` at a time (and on close): each trip to
    aiosqlite's thread costs the event loop real CPU, and a crash only loses replies that
    will be asked again. Reads see buffered writes. WAL lets several processes (e.g. Ray
    actors on one node) share the file. Use it as an async context manager, or call
    `aclose()`; it opens on first use. `hits`, `misses` and `writes` count this object's traffic.
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

    async def __aenter__(self) -> SQLiteJudgeCache:
        await self._connection()
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
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # isolation_level=None: no implicit transactions; flush() opens its own.
                db = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
                try:
                    await db.execute("PRAGMA journal_mode=WAL")
                    await db.execute("PRAGMA synchronous=NORMAL")
                    await db.execute(_SCHEMA)
                except sqlite3.DatabaseError as exc:
                    await db.close()
                    raise sqlite3.DatabaseError(
                        f"judge cache {self.path} is unusable ({exc}); delete it or choose another cache path"
                    ) from exc
                self._db = db
        return self._db

    async def get(self, key: str) -> Any | None:
        """The stored reply for `key`, or None."""
        if key in self._pending:
            self.hits += 1
            return parse_json(self._pending[key])
        db = await self._connection()
        async with db.execute("SELECT value FROM judge_replies WHERE key = ?", (key,)) as cursor:
            found = await cursor.fetchone()
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        return parse_json(found[0])

    async def put(self, key: str, value: Any) -> None:
        """Store a validated reply under `key` (replacing any older one)."""
        self._pending[key] = dumps(value)
        self.writes += 1
        if len(self._pending) >= self.write_batch:
            await self.flush()

    async def flush(self) -> None:
        """Commit the buffered writes in one transaction."""
        if not self._pending:
            return
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
                await db.executemany("INSERT OR REPLACE INTO judge_replies (key, value, created) VALUES (?, ?, ?)",
                                     [(key, value, now) for key, value in batch.items()])
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            await db.execute("COMMIT")

    async def count(self) -> int:
        """How many replies are stored."""
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
                await db.close()


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
        self._replies: OrderedDict[str, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._replies)

    async def get(self, key: str) -> Any | None:
        """The stored reply for `key`, or None."""
        value = self._replies.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._replies.move_to_end(key)
        return value

    async def put(self, key: str, value: Any) -> None:
        """Store a validated reply under `key`, evicting the least recently used past the bound."""
        self._replies[key] = value
        self._replies.move_to_end(key)
        while len(self._replies) > self.max_entries:
            self._replies.popitem(last=False)
