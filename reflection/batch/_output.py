"""The output file: append-only JSON Lines that survive a crash and can be resumed.

Each row is appended as one complete line by one unbuffered `os.write` (looping only on a
short write), so a kill -9 loses at most the rows still in flight and can only leave the
last line partial. On open, that partial line is cut off and the ids already written are
read back, so a rerun skips them. The file is fsynced every `fsync_rows` rows or
`fsync_seconds` seconds, and on close, which bounds what a power loss can take.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from reflection._json import dumps, parse_json

__all__ = ["OutputCorrupt", "OutputFile", "iter_output_rows"]


class OutputCorrupt(ValueError):
    """The output file has a line in the middle that is not a result row."""


def _row_id(line: bytes) -> str | None:
    """The id of a written row, or None when the line is not a JSON object with an id."""
    try:
        row = parse_json(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return None
    return row["id"]


class OutputFile:
    """An output JSON Lines file opened for appending, with the ids it already holds."""

    def __init__(self, path: str | Path, *, fsync_rows: int = 1000, fsync_seconds: float = 2.0):
        self.path = Path(path)
        self.fsync_rows = fsync_rows
        self.fsync_seconds = fsync_seconds
        self.existing_ids: set[str] = set()
        self.truncated_bytes = 0
        """Bytes of a partial last line removed on open (a previous run was killed mid-write)."""
        self.written = 0
        self._fd: int | None = None
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def __enter__(self) -> OutputFile:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> set[str]:
        """Read back the ids already written, cut a partial last line, and open for append."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keep = self._scan() if self.path.exists() else 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        if keep < size:
            os.ftruncate(self._fd, keep)
            os.fsync(self._fd)
            self.truncated_bytes = size - keep
        return self.existing_ids

    def _scan(self) -> int:
        """Collect ids; return the byte length of the good prefix (everything but a bad last line)."""
        offset = 0
        bad: tuple[int, int] | None = None  # (line number, offset) of an unreadable line
        with self.path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                if bad is not None and line.strip():
                    raise OutputCorrupt(
                        f"{self.path}: line {bad[0]} is not a result row, and it is not the last line; "
                        "this file was not written by `reflection batch` alone. Fix or remove that line, "
                        "or choose another output file."
                    )
                if line.strip():
                    rid = _row_id(line) if line.endswith(b"\n") else None
                    if rid is None:
                        bad = (number, offset)
                    else:
                        self.existing_ids.add(rid)
                offset += len(line)
        return bad[1] if bad is not None else offset

    def write(self, row: dict[str, Any]) -> None:
        """Append one row as one line."""
        if self._fd is None:
            raise RuntimeError("OutputFile.write before open()")
        data = (dumps(row) + "\n").encode()
        view = memoryview(data)
        while view:
            done = os.write(self._fd, view)
            view = view[done:]
        self.written += 1
        self._unsynced += 1
        if self._unsynced >= self.fsync_rows or time.monotonic() - self._last_sync >= self.fsync_seconds:
            self.sync()

    def sync(self) -> None:
        """fsync what was written so far."""
        if self._fd is not None and self._unsynced:
            os.fsync(self._fd)
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        """fsync and close (idempotent)."""
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None


def iter_output_rows(path: str | Path) -> Any:
    """Stream the rows of an output file; a partial last line (a killed run) is ignored."""
    path = Path(path)
    with path.open("rb") as f:
        pending: tuple[int, str] | None = None
        for number, line in enumerate(f, start=1):
            if pending is not None and line.strip():
                raise OutputCorrupt(f"{path}: line {pending[0]} is not valid JSON ({pending[1]})")
            if not line.strip():
                continue
            try:
                row = parse_json(line)
            except ValueError as exc:
                pending = (number, str(exc))
                continue
            if isinstance(row, dict):
                yield row
