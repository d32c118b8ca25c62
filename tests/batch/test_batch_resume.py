"""The output file: resume skips written ids, a partial last line is cut, nothing is written twice."""

import json

import pytest

from reflection.batch import OutputCorrupt, run_batch
from reflection.batch._output import OutputFile, iter_output_rows
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig


def output_ids(path):
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", "the file must end with a newline"
    return [json.loads(line)["id"] for line in lines[:-1]]


async def test_rerun_with_the_same_output_skips_every_written_row(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(20))
    out = tmp_path / "out.jsonl"
    first = await run_batch(source, out, config=ReflectionConfig())
    second = await run_batch(source, out, config=ReflectionConfig())
    assert (first.written, first.skipped) == (20, 0)
    assert (second.written, second.skipped) == (0, 20)
    assert sorted(output_ids(out)) == sorted(r["id"] for r in synthetic_rows(20))


async def test_resume_writes_only_the_missing_rows(tmp_path):
    rows = list(synthetic_rows(12))
    out = tmp_path / "out.jsonl"
    await run_batch(write_jsonl(tmp_path / "part.jsonl", rows[:5]), out, config=ReflectionConfig())
    stats = await run_batch(write_jsonl(tmp_path / "all.jsonl", rows), out, config=ReflectionConfig())
    assert (stats.written, stats.skipped) == (7, 5)
    ids = output_ids(out)
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert len(ids) == len(set(ids))


async def test_a_partial_last_line_is_cut_before_appending(tmp_path):
    rows = list(synthetic_rows(6))
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    await run_batch(write_jsonl(tmp_path / "part.jsonl", rows[:3]), out, config=ReflectionConfig())
    with out.open("ab") as f:
        f.write(b'{"id": "' + rows[3]["id"].encode() + b'", "overall_val')  # a write cut short by a crash
    stats = await run_batch(source, out, config=ReflectionConfig())
    assert stats.truncated_bytes == len(rows[3]["id"]) + 23
    assert stats.written == 3
    assert sorted(output_ids(out)) == sorted(r["id"] for r in rows)


async def test_duplicate_input_ids_keep_their_names_across_a_resume(tmp_path):
    row = next(synthetic_rows(1))
    source = write_jsonl(tmp_path / "in.jsonl", [row, row, row])
    out = tmp_path / "out.jsonl"
    first = await run_batch(source, out, config=ReflectionConfig())
    second = await run_batch(source, out, config=ReflectionConfig())
    assert first.duplicates == 2
    assert (second.written, second.skipped) == (0, 3)
    assert sorted(output_ids(out)) == sorted([row["id"], f"{row['id']}#2", f"{row['id']}#3"])


def test_a_bad_line_in_the_middle_is_refused_with_its_line_number(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\nnot a row\n{"id": "b"}\n')
    with pytest.raises(OutputCorrupt, match="line 2 is not a result row"):
        OutputFile(out).open()


def test_a_complete_last_line_without_newline_is_kept_only_if_it_ends_cleanly(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n{"id": "b"}')  # no newline: treated as partial and cut
    with OutputFile(out) as f:
        assert f.existing_ids == {"a"}
        f.write({"id": "b", "overall_valid": True})
    assert output_ids(out) == ["a", "b"]


def test_reading_an_output_ignores_a_partial_last_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n{"id": "b", "ov')
    assert [r["id"] for r in iter_output_rows(out)] == ["a"]


async def test_the_input_file_cannot_be_the_output(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(1))
    with pytest.raises(ValueError, match="must not be the input"):
        await run_batch(source, source, config=ReflectionConfig())
