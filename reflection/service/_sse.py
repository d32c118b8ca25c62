"""Server-sent events read as the specification says, with bounded memory.

The gateway reads the upstream's event stream to hold tool calls until they are complete. It
must read every stream a client's own SDK reads, or a call would slip past unchecked: lines end
in CRLF, LF or a bare CR; an event's `data:` may span several lines (joined by newlines); an
event ends at a blank line; comments (`:`) and other fields (`event:`, `id:`, `retry:`) ride
along. And it must not let one upstream take the service's memory: a line or an event longer
than `max_bytes`, or a stream longer than `max_total`, raises `StreamTooLarge`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from reflection._slices import let_go
from reflection.errors import StreamTooLarge

__all__ = ["Event", "StreamTooLarge", "events"]


@dataclass
class Event:
    """One event: its data lines joined by newlines (None when it had no `data:` field), and
    its other lines (comments, `event:`, `id:`, `retry:`) as they came."""

    data: str | None = None
    other: list[str] = field(default_factory=list)

    def encode(self, data: str | None = None) -> bytes:
        """The event as SSE bytes, with LF line ends, and `data` in place of its own if given."""
        lines = list(self.other)
        text = self.data if data is None else data
        if text is not None:
            lines += ["data: " + line for line in text.split("\n")]
        return ("\n".join(lines) + "\n\n").encode()


_LINE_END = re.compile(rb"[\r\n]")


async def events(chunks: AsyncIterator[bytes], *, max_bytes: int, max_total: int) -> AsyncIterator[Event]:
    """The events of a byte stream. The last event is dispatched at the end of the stream even
    without its blank line (the SDKs do the same). Linear in the stream: each byte is searched for
    a line end once, and an event's size is counted as its lines come (a 65 MB line, or an event
    of a million lines, cost seconds of CPU when every chunk searched and summed them again)."""
    pending = bytearray()
    scanned = 0  # pending[:scanned] holds no line end: searched already
    skip_lf = False  # the last chunk ended in CR: an LF starting the next one belongs to it
    total = 0
    current = Event()
    data_lines: list[str] = []
    data_size = 0  # sum(map(len, data_lines))
    async for chunk in chunks:
        total += len(chunk)
        if total > max_total:
            await let_go(pending)
            raise StreamTooLarge(f"the upstream's stream passed {max_total} bytes")
        if skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        skip_lf = False
        pending += chunk
        start = 0
        length = len(pending)
        while True:
            found = _LINE_END.search(pending, max(start, scanned))
            if found is None:
                break
            end = found.start()
            line = bytes(pending[start:end])
            if pending[end] == 0x0D:  # CR
                if end + 1 < length:
                    start = end + 2 if pending[end + 1] == 0x0A else end + 1
                else:  # CR at the end of what arrived: an LF may follow in the next chunk
                    start = end + 1
                    skip_lf = True
            else:
                start = end + 1
            lines = len(data_lines)
            event = _take(line.decode("utf-8", "replace"), current, data_lines)
            if event is not None:
                yield event
                current, data_lines, data_size = Event(), [], 0
            elif len(data_lines) > lines:
                data_size += len(data_lines[-1])
        del pending[:start]
        scanned = len(pending)
        if len(pending) > max_bytes or data_size > max_bytes:
            await let_go(pending)
            raise StreamTooLarge(f"an event of the upstream's stream passed {max_bytes} bytes")
    if pending:
        _take(pending.decode("utf-8", "replace"), current, data_lines)
    if data_lines or current.other:
        current.data = "\n".join(data_lines) if data_lines else None
        yield current


def _take(line: str, current: Event, data_lines: list[str]) -> Event | None:
    """Add one line to the event being read; the event when the line ends it."""
    if not line:
        if not data_lines and not current.other:
            return None
        current.data = "\n".join(data_lines) if data_lines else None
        return current
    name, colon, value = line.partition(":")
    if colon and name == "data":
        data_lines.append(value[1:] if value.startswith(" ") else value)
    elif name == "data":  # a bare `data` line is an empty data line
        data_lines.append("")
    else:
        current.other.append(line)
    return None
