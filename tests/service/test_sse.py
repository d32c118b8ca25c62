"""The gateway's SSE reader (`reflection.service._sse.events`): however the bytes are split into
chunks, the events are those of the whole text read line by line as the specification says, and
its limits hold."""

from __future__ import annotations

import re

import anyio
import pytest

pytest.importorskip("fastapi")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from reflection.service._sse import Event, StreamTooLarge, _take, events  # noqa: E402

PIECES = [
    b"data: ",
    b"data:",
    b"data",
    b"x",
    b"{}",
    b"\r",
    b"\n",
    b"\r\n",
    b": note",
    b"event: e",
    b"id: 7",
    b"\xc3\xa9",
    b" ",
]


def _whole(text: bytes) -> list[tuple[str | None, list[str]]]:
    """The events of `text` read at once: its lines (ended by CRLF, LF or CR), then as `events`
    takes them, the last event dispatched at the end."""
    lines = re.split(rb"\r\n|\r|\n", text)
    if lines and lines[-1] == b"":
        lines.pop()  # the text ended with a line end: no partial last line
    out, current, data_lines = [], Event(), []
    for line in lines:
        event = _take(line.decode("utf-8", "replace"), current, data_lines)
        if event is not None:
            out.append((event.data, event.other))
            current, data_lines = Event(), []
    if data_lines or current.other:
        out.append(("\n".join(data_lines) if data_lines else None, current.other))
    return out


def _read(
    chunks: list[bytes], max_bytes: int = 1 << 20, max_total: int = 1 << 24
) -> list[tuple[str | None, list[str]]]:
    async def feed():
        for chunk in chunks:
            yield chunk

    async def main():
        return [(event.data, event.other) async for event in events(feed(), max_bytes=max_bytes, max_total=max_total)]

    return anyio.run(main)


def _split(text: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(text) + 1) for cut in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=60), st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)
)
def test_events_are_the_same_however_the_stream_is_chunked(pieces, cuts):
    text = b"".join(pieces)
    assert _read(_split(text, cuts)) == _whole(text)


def test_a_crlf_split_between_chunks_is_one_line_end():
    assert _read([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [("a\nb", [])]


def test_a_line_longer_than_max_bytes_is_refused_at_once():
    with pytest.raises(StreamTooLarge, match="an event"):
        _read([b"data: " + b"x" * 1000] * 10, max_bytes=4096)


def test_an_event_of_many_lines_longer_than_max_bytes_is_refused():
    with pytest.raises(StreamTooLarge, match="an event"):
        _read([b"data: xy\n" * 1000] * 10, max_bytes=4096)


def test_many_events_each_under_max_bytes_are_read():
    assert len(_read([b"data: xy\n\n" * 1000] * 10, max_bytes=4096)) == 10_000


def test_a_stream_longer_than_max_total_is_refused():
    with pytest.raises(StreamTooLarge, match="stream passed"):
        _read([b"data: x\n\n" * 100] * 10, max_total=4000)
