"""`reflect_dataset`: every row out once with its id, a bounded window, duplicate ids, early exit."""

import asyncio

import pytest

from reflection.batch import reflect_dataset
from reflection.batch._synthetic import synthetic_row, synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig
from reflection.pipeline import Reflector


async def collect(gen):
    return [row async for row in gen]


async def test_every_row_comes_out_once_with_its_id_and_verdict():
    rows = list(synthetic_rows(30))
    out = await collect(reflect_dataset(rows, config=ReflectionConfig(), concurrency=4))
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in rows)
    verdicts = {r["id"]: r["overall_valid"] for r in out}
    # Static only: the ungrounded rows are well-formed, so only the static failures are invalid.
    assert {v for k, v in verdicts.items() if k.startswith("static_invalid")} == {False}
    assert {v for k, v in verdicts.items() if not k.startswith("static_invalid")} == {True}
    assert all(r["judge_skipped"] for r in out)


async def test_reads_a_file_path(tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(5))
    with path.open("a") as f:
        f.write("not json\n")
    out = await collect(reflect_dataset(path, config=ReflectionConfig()))
    by_id = {r["id"]: r for r in out}
    assert len(out) == 6
    assert by_id["line-6"]["error"].startswith("line 6 is not valid JSON")
    assert by_id["line-6"]["overall_valid"] is None


async def test_accepts_an_async_iterable():
    async def rows():
        for row in synthetic_rows(4):
            yield row

    out = await collect(reflect_dataset(rows(), config=ReflectionConfig()))
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in synthetic_rows(4))


async def test_rows_without_id_are_named_by_position_and_unusable_rows_become_error_rows():
    row = synthetic_row(0)
    del row["id"]
    out = await collect(reflect_dataset([row, {"id": "no-call", "tools": []}, [1, 2]], config=ReflectionConfig()))
    by_id = {r["id"]: r for r in out}
    assert set(by_id) == {"line-1", "no-call", "line-3"}
    assert by_id["line-1"]["overall_valid"] is True
    assert 'no "call" or "tool_calls" field' in by_id["no-call"]["error"]
    assert "expected a JSON object" in by_id["line-3"]["error"]


async def test_duplicate_input_ids_become_suffixed_error_rows():
    row = synthetic_row(0)
    rows = [row, row, {**row, "id": f"{row['id']}#2"}, row]
    out = await collect(reflect_dataset(rows, config=ReflectionConfig()))
    by_id = {r["id"]: r for r in out}
    first = row["id"]
    assert sorted(by_id) == sorted([first, f"{first}#2", f"{first}#2#2", f"{first}#3"])
    assert by_id[first]["overall_valid"] is True
    assert by_id[f"{first}#2"]["error"].startswith(f"duplicate id {first!r}")
    # A real id that a duplicate already took is itself a duplicate of that name.
    assert by_id[f"{first}#2#2"]["error"].startswith(f"duplicate id '{first}#2'")
    assert "input position 4" in by_id[f"{first}#3"]["error"]


async def test_skip_ids_are_neither_reflected_nor_yielded():
    rows = list(synthetic_rows(6))
    skip = {rows[0]["id"], rows[3]["id"]}
    out = await collect(reflect_dataset(rows, config=ReflectionConfig(), skip_ids=skip))
    assert {r["id"] for r in out} == {r["id"] for r in rows} - skip


class CountingReflector:
    """Stands in for a Reflector: records how many rows are in flight at once."""

    def __init__(self, release: asyncio.Event | None = None):
        self.config = ReflectionConfig()
        self.in_flight = 0
        self.peak = 0
        self.cancelled = 0
        self.release = release
        self.real = Reflector(ReflectionConfig())

    async def reflect(self, call, tools, history):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.release is not None:
                await self.release.wait()
            else:
                await asyncio.sleep(0.001)
            return await self.real.reflect(call, tools, history)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1


async def test_rows_in_flight_stay_within_twice_the_concurrency():
    reflector = CountingReflector()
    out = await collect(reflect_dataset(synthetic_rows(100), reflector=reflector, concurrency=3))
    assert len(out) == 100
    assert reflector.peak == 6


async def test_closing_the_iterator_early_cancels_rows_in_flight():
    reflector = CountingReflector(release=asyncio.Event())
    gen = reflect_dataset(synthetic_rows(50), reflector=reflector, concurrency=2)
    task = asyncio.ensure_future(gen.__anext__())
    while reflector.in_flight < 4:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gen.aclose()
    assert reflector.cancelled == 4
    assert reflector.in_flight == 0


async def test_concurrency_below_one_is_refused():
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        await collect(reflect_dataset([], config=ReflectionConfig(), concurrency=0))


async def test_the_fake_judge_kit_intercepts_the_batch_judge_client(fake_judge):
    fake_judge.script("general_hallucination_check", score=1, explanation="invented")
    config = ReflectionConfig(judge=fake_judge.config)
    out = await collect(reflect_dataset(synthetic_rows(6, ("valid",)), config=config, concurrency=4))
    assert [r["overall_valid"] for r in out] == [False] * 6
    assert len(fake_judge.requests) == 6
