"""The output file: append-only JSON Lines that survive a crash and can be resumed.

Each row is appended as one complete line by one unbuffered `os.write` (looping only on a
short write), so a kill -9 loses at most the rows still in flight and can only leave the
last line partial: a last line without a newline. On open, that partial line is cut off and
the ids already written are read back, so a rerun skips them. A file with any complete line
that is not a result row was not written by us and is refused, never changed. The file is
fsynced every `fsync_rows` rows or `fsync_seconds` seconds, and on close, which bounds what a
power loss can take. While open, the file holds an exclusive `flock`, so a second run on the
same output stops at once instead of writing every id again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from reflection._json import dumps, parse_json

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: runs go unlocked
    fcntl = None  # type: ignore[assignment]

__all__ = ["OutputCorrupt", "OutputFile", "OutputLocked", "iter_output_rows"]


class OutputCorrupt(ValueError):
    """The output file has a line that is not a result row: it was not written by `reflection batch` alone."""


class OutputLocked(RuntimeError):
    """Another process is writing the output file."""


def _lock_holder(fd: int) -> int | None:
    """The pid holding a `flock` on the file behind `fd`, from /proc/locks (Linux), else None."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters have "->")
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode and fields[4].isdigit():
                    return int(fields[4])
    except OSError:
        pass
    return None


def _row_id(line: bytes) -> str | None:
    """The id of a written row, or None when the line is not a JSON object with an id."""
    try:
        row = parse_json(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return None
    return row["id"]


def _partial_row(line: bytes) -> bool:
    """Whether a last line without a newline is the start of a row a killed run was writing
    (rows start with `{"id"`), and not a complete line of some other file."""
    text = line.lstrip()
    if not text.startswith(b"{"):
        return False
    try:
        parse_json(text)
    except ValueError:
        return True  # cut short
    return _row_id(text) is not None  # a whole row that lost only its newline


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
        """Lock the file, read back the ids already written, cut a partial last line, and open for append."""
        if self.path.is_dir():
            raise IsADirectoryError(21, "is a directory; give a file name for the output", str(self.path))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._lock(fd)
            keep = self._scan()
            size = os.fstat(fd).st_size
            if keep < size:
                os.ftruncate(fd, keep)
                os.fsync(fd)
                self.truncated_bytes = size - keep
        except BaseException:
            os.close(fd)  # also releases the lock
            raise
        self._fd = fd
        return self.existing_ids

    def _lock(self, fd: int) -> None:
        if fcntl is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            who = f"process {holder}" if holder is not None else "another process"
            raise OutputLocked(f"{self.path} is being written by {who}; wait for that run to finish "
                               "or choose another output file") from None

    def _scan(self) -> int:
        """Collect ids; return the byte length to keep (all but a partial last line)."""
        offset = 0
        with self.path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    rid = _row_id(line) if line.endswith(b"\n") else None
                    if rid is None:
                        if not line.endswith(b"\n") and _partial_row(line):
                            return offset  # the last line, cut short by a killed run
                        raise OutputCorrupt(
                            f"{self.path}: line {number} is not a result row; this file was not written "
                            "by `reflection batch` alone, so it is left unchanged. Choose another output "
                            "file, or fix or remove that line."
                        )
                    self.existing_ids.add(rid)
                offset += len(line)
        return offset

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
