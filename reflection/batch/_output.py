"""The output file: append-only JSON Lines that survive a crash and can be resumed.

Rows are appended as complete lines, up to `WRITE_BUFFER` bytes of them per `os.write`
(looping only on a short write), so a kill -9 loses at most the rows still in flight or
buffered (a rerun reflects them again) and can only leave the last line partial: a last
line without a newline. On open, that partial line is cut off and
the ids already written are read back, so a rerun skips them. A file with any complete line
that is not a result row was not written by us and is refused, never changed. The file is
fsynced every `fsync_rows` rows or `fsync_seconds` seconds, and on close, which bounds what a
power loss can take. While open, the file holds an exclusive `flock`, so a second run on the
same output stops at once instead of writing every id again.

Rows whose judge failed (`judge_failed`) can be asked again: after `start_retry(ids)`, their new
rows go to a side file beside the output while the old rows stay where they are, and
`finish_retry()` replaces the old rows with the new ones by writing the output anew to a
temporary file and renaming it over the output (atomic: a crash leaves either the old file or
the new one, and never an id twice). A run killed before then leaves every old row in place
(a rerun asks again, its judge cache making that cheap), never a row missing. That is the only
time a written row changes; the lock moves to the new file before the rename, so no other run
can slip in between. (`drop()` removes such rows without replacing them.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from reflection._json import dumps_line, parse_json
from reflection.errors import OutputCorrupt, OutputLocked

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: runs go unlocked
    fcntl = None  # type: ignore[assignment]

__all__ = ["OutputCorrupt", "OutputFile", "OutputLocked", "iter_output_rows", "judge_failed"]


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


def _lock(fd: int, path: Path) -> None:
    """Take the exclusive lock on an open output file, or raise OutputLocked naming the holder."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        who = f"process {holder}" if holder is not None else "another process"
        raise OutputLocked(
            f"{path} is being written by {who}; wait for that run to finish or choose another output file"
        ) from None


def _row(line: bytes) -> dict[str, Any] | None:
    """A written row, or None when the line is not a JSON object with an id."""
    try:
        row = parse_json(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return None
    return row


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
    return _row(text) is not None  # a whole row that lost only its newline


def judge_failed(row: dict[str, Any]) -> bool:
    """Whether a result row lacks its verdict only because the judge failed: `overall_valid`
    is null and a judge check ended in `error` (after its retries). Error rows (bad input) and
    uncertain verdicts are not judge failures: asking again would not change them."""
    if "error" in row or row.get("overall_valid") is not None:
        return False
    return any(check.get("status") == "error" for _, check in semantic_checks(row))


def semantic_checks(row: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(name, check) for each semantic check of each result; parts that are not objects are skipped."""
    results = row.get("results")
    for result in results if isinstance(results, list) else ():
        semantic = result.get("semantic") if isinstance(result, Mapping) else None
        for name, check in semantic.items() if isinstance(semantic, Mapping) else ():
            if isinstance(check, Mapping):
                yield str(name), check


WRITE_BUFFER = 1 << 18
"""Bytes of rows gathered before they are written (they are also written at every fsync)."""


class OutputFile:
    """An output JSON Lines file opened for appending, with the ids it already holds."""

    def __init__(
        self,
        path: str | Path,
        *,
        fsync_rows: int = 1000,
        fsync_seconds: float = 2.0,
        retry: Callable[[dict[str, Any]], bool] | None = None,
    ):
        self.path = Path(path)
        self.fsync_rows = fsync_rows
        self.fsync_seconds = fsync_seconds
        self.retry = retry
        self.existing_ids: set[str] = set()
        self.retry_ids: set[str] = set()
        """Ids of written rows for which `retry(row)` is true (see `drop`)."""
        self.truncated_bytes = 0
        """Bytes of a partial last line removed on open (a previous run was killed mid-write)."""
        self.written = 0
        self._fd: int | None = None
        self._retrying: set[str] = set()
        self._retried: set[str] = set()
        self._side: Any = None
        self._buffer: list[bytes] = []
        self._buffered = 0
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
            _lock(fd, self.path)
            self._side_path().unlink(missing_ok=True)  # new rows of a retry killed before it finished
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

    def _scan(self) -> int:
        """Collect ids; return the byte length to keep (all but a partial last line)."""
        offset = 0
        with self.path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    row = _row(line) if line.endswith(b"\n") else None
                    if row is None:
                        if not line.endswith(b"\n") and _partial_row(line):
                            return offset  # the last line, cut short by a killed run
                        raise OutputCorrupt(
                            f"{self.path}: line {number} is not a result row; this file was not written "
                            "by `reflection batch` alone, so it is left unchanged. Choose another output "
                            "file, or fix or remove that line."
                        )
                    self.existing_ids.add(row["id"])
                    if self.retry is not None and self.retry(row):
                        self.retry_ids.add(row["id"])
                offset += len(line)
        return offset

    def drop(self, ids: Collection[str]) -> int:
        """Remove the rows with these ids (among `retry_ids`) so they can be written again;
        returns how many were removed. Atomic: the rest goes to a temporary file beside the
        output (a symlink's target), which then replaces it."""
        ids = {rid for rid in ids if rid in self.retry_ids}
        if not ids:
            return 0
        removed = self._rewrite(ids, None)
        self.existing_ids -= ids
        self.retry_ids -= ids
        return removed

    def start_retry(self, ids: Collection[str]) -> set[str]:
        """Ask again for the rows with these ids (among `retry_ids`): `write` sends their new rows
        to a side file and the old rows stay until `finish_retry`. Returns the ids to ask again;
        the caller reflects them as if they had not been written."""
        self._retrying = {rid for rid in ids if rid in self.retry_ids}
        return set(self._retrying)

    def finish_retry(self) -> int:
        """Replace the old rows of the ids asked again with their new rows, atomically; returns how
        many were replaced. Rows not asked again by now keep their old rows."""
        retried, self._retried, self._retrying = self._retried, set(), set()
        side, self._side = self._side, None
        if side is None:
            return 0
        try:
            side.flush()
            os.fsync(side.fileno())
            return self._rewrite(retried, self._side_path()) if retried else 0
        finally:
            side.close()
            self._side_path().unlink(missing_ok=True)

    def _side_path(self) -> Path:
        target = self.path.resolve()
        return target.with_name(f".{target.name}.retried")

    def _rewrite(self, ids: set[str], extra: Path | None) -> int:
        """Write the output anew without the `retry`-worthy rows with these ids, then `extra`'s
        rows, and rename it over the output; returns how many rows were removed."""
        if self._fd is None:
            raise RuntimeError("OutputFile rewrite before open()")
        self.sync()
        target = self.path.resolve()
        temp = target.with_name(f".{target.name}.rewrite")
        removed = 0
        # The old file stays open and locked until the new one, locked too, has replaced it.
        new_fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            _lock(new_fd, temp)
            with target.open("rb") as src, os.fdopen(os.dup(new_fd), "wb") as dst:
                for line in src:
                    row = _row(line) if line.strip() else None
                    if row is not None and row["id"] in ids and self.retry is not None and self.retry(row):
                        removed += 1
                        continue
                    dst.write(line)
                if extra is not None:
                    with extra.open("rb") as rows:
                        while chunk := rows.read(WRITE_BUFFER):
                            dst.write(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            os.chmod(temp, os.stat(target).st_mode & 0o7777)
            os.replace(temp, target)
        except BaseException:
            os.close(new_fd)
            temp.unlink(missing_ok=True)
            raise
        os.close(self._fd)
        self._fd = new_fd
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power loss
        finally:
            os.close(directory)
        return removed

    def write(self, row: dict[str, Any]) -> None:
        """Append one row as one line (a row asked again after `retry`: to the side file)."""
        if self._retrying and row.get("id") in self._retrying:
            if self._side is None:
                self._side = self._side_path().open("wb")
            self._side.write(dumps_line(row))
            self._retried.add(row["id"])
            self.written += 1
            return
        self.write_line(dumps_line(row))

    def write_line(self, data: bytes) -> None:
        """Append one row already serialised: its JSON text and the newline (the worker
        processes of `--workers` serialise rows themselves)."""
        if self._fd is None:
            raise RuntimeError("OutputFile.write_line before open()")
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered >= WRITE_BUFFER:
            self._flush()
        self.written += 1
        self._unsynced += 1
        if self._unsynced >= self.fsync_rows or time.monotonic() - self._last_sync >= self.fsync_seconds:
            self.sync()

    def _flush(self) -> None:
        if not self._buffer:
            return
        assert self._fd is not None
        view = memoryview(b"".join(self._buffer))
        self._buffer.clear()
        self._buffered = 0
        while view:
            done = os.write(self._fd, view)
            view = view[done:]

    def sync(self) -> None:
        """Write the buffered rows and fsync what was written so far."""
        if self._fd is not None:
            self._flush()
            if self._unsynced:
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
