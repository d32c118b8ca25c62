"""Dataset readers: JSON Lines, JSON arrays (streamed), CSV with JSON columns, Parquet."""

import csv
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection.batch import inputs
from reflection.batch._synthetic import synthetic_row, synthetic_rows, write_jsonl
from reflection.batch.inputs import SourceRow, _bounded_lines, _LineTooLong, count_rows, detect_format, read_source


def test_jsonl_rows_stream_with_their_line_numbers(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "call": {}}\n\n{"id": "b", "call": {}}\n')
    rows = list(read_source(path))
    assert rows == [SourceRow(1, {"id": "a", "call": {}}), SourceRow(3, {"id": "b", "call": {}})]


def test_jsonl_line_that_is_not_json_becomes_an_error_with_its_line_number(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "call": {}}\n{"id": "b", "call": \n')
    rows = list(read_source(path))
    assert rows[1].position == 2
    assert rows[1].raw is None
    assert rows[1].error.startswith("line 2 is not valid JSON")


def test_json_array_elements_are_streamed_in_order(tmp_path):
    expected = list(synthetic_rows(5))
    path = tmp_path / "in.json"
    path.write_text(json.dumps(expected, indent=2))
    rows = list(read_source(path))
    assert [r.raw for r in rows] == expected
    assert [r.position for r in rows] == [1, 2, 3, 4, 5]


def test_json_array_elements_larger_than_the_read_chunk_are_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "_CHUNK", 16)
    expected = [synthetic_row(i) for i in range(3)] + [12345678901234, "text", None, [1, 2]]
    path = tmp_path / "in.json"
    path.write_text(json.dumps(expected))
    assert [r.raw for r in read_source(path)] == expected


def test_json_array_with_a_broken_element_ends_with_one_error(tmp_path):
    path = tmp_path / "in.json"
    path.write_text('[{"id": "a", "call": {}}, {"id": "b", "call": ]')
    rows = list(read_source(path))
    assert rows[0].raw == {"id": "a", "call": {}}
    assert rows[1].position == 2
    assert "element 2" in rows[1].error and "rest of the file" in rows[1].error
    assert len(rows) == 2


def test_json_file_that_is_not_an_array_is_one_error(tmp_path):
    path = tmp_path / "in.json"
    path.write_text('{"id": "a"}')
    [row] = list(read_source(path))
    assert "not a JSON array" in row.error


def test_truncated_json_array_says_so(tmp_path):
    path = tmp_path / "in.json"
    path.write_text('[{"id": "a", "call": {}},')
    rows = list(read_source(path))
    assert rows[-1].error.endswith("the file is truncated")


def test_csv_json_columns_are_decoded_and_empty_cells_dropped(tmp_path):
    row = synthetic_row(0)
    path = tmp_path / "in.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, ["id", "tools", "history", "call", "note"])
        writer.writeheader()
        writer.writerow(
            {
                "id": row["id"],
                "tools": json.dumps(row["tools"]),
                "history": json.dumps(row["history"]),
                "call": json.dumps(row["call"]),
                "note": "kept as text",
            }
        )
        writer.writerow({"id": "", "tools": "", "history": "", "call": json.dumps(row["call"]), "note": ""})
    first, second = read_source(path)
    assert first.raw == {**row, "note": "kept as text"}
    assert second.raw == {"call": row["call"], "note": ""}
    assert second.position == 2


def test_csv_cell_that_is_not_json_is_an_error_naming_the_column(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('id,call\nx,"{not json"\n')
    [row] = list(read_source(path))
    assert row.error.startswith("record 1: column 'call' is not valid JSON")


def test_csv_without_a_call_column_is_one_error(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,tools\nx,[]\n")
    [row] = list(read_source(path))
    assert "no 'call' or 'tool_calls' column" in row.error


def test_parquet_rows_accept_json_text_and_nested_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [synthetic_row(i) for i in range(3)]
    table = pa.table(
        {
            "id": [r["id"] for r in rows],
            "tools": [json.dumps(r["tools"]) for r in rows],
            "history": [r["history"] for r in rows],  # nested list<struct>
            "call": [json.dumps(r["call"]) for r in rows],
        }
    )
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    got = list(inputs._read_parquet(path, batch_size=2))
    assert [g.raw for g in got] == rows
    assert [g.position for g in got] == [1, 2, 3]
    assert count_rows(path) == 3


def test_unknown_extension_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown input extension '\.txt'; use one of .csv, .json, .jsonl"):
        detect_format(tmp_path / "rows.txt")


def test_count_rows_counts_non_blank_lines(tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(7))
    with path.open("a") as f:
        f.write("\n\n")
    assert count_rows(path) == 7
    assert count_rows(tmp_path / "x.json") is None


def _lines_by_readline(f, limit):
    """The reference: what reading with readline gives (the reader cuts lines out of blocks)."""
    number = 0
    while line := f.readline(limit + 1):
        number += 1
        if len(line) > limit and line[limit:] != b"\n":
            size = len(line)
            while not line.endswith(b"\n") and (line := f.readline(1 << 16)):
                size += len(line)
            size -= line.endswith(b"\n")
            yield (
                number,
                f"line {number} is longer than the {limit:,}-byte limit (max_line_bytes): {size:,} bytes; it was skipped",
            )
        else:
            yield number, line


class _Trickle(io.BytesIO):
    """A stream whose reads return a few bytes at a time, as a pipe may."""

    def __init__(self, data: bytes, step: int):
        super().__init__(data)
        self.step = step

    def read1(self, size: int = -1) -> bytes:
        return super().read1(self.step)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40) | st.sampled_from([b"a" * 70_000, b"\r" * 9]), max_size=8),
    end=st.sampled_from([b"", b"\n", b"\n\n"]),
    limit=st.sampled_from([1, 5, 10, 64, 70_000]),
    step=st.sampled_from([None, 1, 3, 4096]),
)
def test_lines_cut_out_of_blocks_are_the_lines_readline_gives(lines, end, limit, step):
    data = b"\n".join(line.replace(b"\n", b"") for line in lines) + end
    stream = io.BytesIO(data) if step is None else _Trickle(data, step)
    got = [(n, str(line) if isinstance(line, _LineTooLong) else line) for n, line in _bounded_lines(stream, limit)]
    assert got == list(_lines_by_readline(io.BytesIO(data), limit))
