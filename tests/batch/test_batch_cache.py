"""The SQLite judge cache: replies persist, and a rerun of a finished batch asks the judge nothing."""

import sqlite3

import pytest

from reflection.batch import SQLiteJudgeCache, default_cache_path, run_batch
from reflection.batch._output import iter_output_rows
from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig
from reflection.judge import JudgeConfig
from reflection.testing.server import StandInJudge


@pytest.fixture
def server():
    with StandInJudge(idle_timeout=30) as judge:
        yield judge


def judge_config(server):
    return ReflectionConfig(judge=JudgeConfig(base_url=server.base_url, model="stand-in", max_attempts=1))


async def test_a_stored_reply_is_read_back_by_a_new_connection(tmp_path):
    path = tmp_path / "cache.sqlite"
    async with SQLiteJudgeCache(path) as cache:
        assert await cache.get("k") is None
        await cache.put("k", {"score": 5, "evidence": ["a"]})
    async with SQLiteJudgeCache(path) as cache:
        assert await cache.get("k") == {"score": 5, "evidence": ["a"]}
        assert (cache.hits, cache.misses) == (1, 0)


async def test_the_cache_file_uses_write_ahead_logging(tmp_path):
    path = tmp_path / "cache.sqlite"
    async with SQLiteJudgeCache(path) as cache:
        await cache.put("k", 1)
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_file_that_is_not_sqlite_turns_the_cache_off_with_one_warning_advising_deletion(tmp_path, caplog):
    path = tmp_path / "cache.sqlite"
    path.write_text("this is not a database" * 100)
    async with SQLiteJudgeCache(path) as cache:
        assert await cache.get("k") is None
        await cache.put("k", 1)
        assert await cache.get("k") is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "reflection.cache"]
    assert len(warnings) == 1
    assert f"judge cache {path}: DatabaseError: file is not a database" in warnings[0]
    assert "the file is corrupt: delete it" in warnings[0]
    assert path.read_text() == "this is not a database" * 100  # never changed


async def test_a_full_database_turns_the_cache_off_without_advising_deletion(tmp_path, caplog):
    path = tmp_path / "cache.sqlite"
    async with SQLiteJudgeCache(path, write_batch=1) as cache:
        await cache.put("small", 1)
        await cache._db.execute("PRAGMA max_page_count = 4")  # SQLite's own "database or disk is full"
        await cache.put("big", "x" * 100_000)
        assert cache.failure is not None and "database or disk is full" in cache.failure
        assert await cache.get("small") is None  # off: every lookup misses
    warnings = [r.getMessage() for r in caplog.records if r.name == "reflection.cache"]
    assert len(warnings) == 1 and "carrying on without the cache" in warnings[0]
    assert "delete" not in warnings[0]
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM judge_replies").fetchone()[0] == 1


@pytest.mark.parametrize("broken", ["corrupt", "unopenable"])
async def test_a_batch_with_a_broken_cache_completes_without_it(tmp_path, server, caplog, broken):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(4))
    if broken == "corrupt":
        cache_file = tmp_path / "cache.sqlite"
        cache_file.write_bytes(b"\x00garbage" * 500)
    else:
        (tmp_path / "a-file").write_text("")
        cache_file = tmp_path / "a-file" / "cache.sqlite"  # its directory cannot exist
    stats = await run_batch(source, tmp_path / "out.jsonl", config=judge_config(server), cache_path=cache_file)
    rows = list(iter_output_rows(tmp_path / "out.jsonl"))
    assert stats.written == 4 and all("error" not in r for r in rows)
    warnings = [r.getMessage() for r in caplog.records if r.name == "reflection.cache"]
    assert len(warnings) == 1 and str(cache_file) in warnings[0]
    assert ("delete it" in warnings[0]) == (broken == "corrupt")


async def test_rerunning_a_finished_batch_into_a_new_output_makes_zero_judge_requests(tmp_path, server):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(30))
    first = await run_batch(source, tmp_path / "a.jsonl", config=judge_config(server), concurrency=8)
    asked = server.requests
    assert asked == first.judge_requests == 20  # the 10 statically invalid rows never reach the judge
    second = await run_batch(source, tmp_path / "b.jsonl", config=judge_config(server), concurrency=8)
    assert server.requests == asked
    assert (second.judge_requests, second.cache_hits) == (0, 20)
    verdicts = {r["id"]: r["overall_valid"] for r in iter_output_rows(tmp_path / "a.jsonl")}
    assert {r["id"]: r["overall_valid"] for r in iter_output_rows(tmp_path / "b.jsonl")} == verdicts
    assert default_cache_path(tmp_path / "a.jsonl").is_file()


async def test_rerunning_with_the_same_output_makes_zero_judge_requests(tmp_path, server):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(9))
    out = tmp_path / "out.jsonl"
    await run_batch(source, out, config=judge_config(server), cache=False)
    asked = server.requests
    again = await run_batch(source, out, config=judge_config(server), cache=False)
    assert server.requests == asked
    assert (again.written, again.skipped) == (0, 9)


async def test_without_the_cache_a_rerun_asks_again(tmp_path, server):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(6))
    await run_batch(source, tmp_path / "a.jsonl", config=judge_config(server), cache=False)
    asked = server.requests
    await run_batch(source, tmp_path / "b.jsonl", config=judge_config(server), cache=False)
    assert server.requests == 2 * asked
    assert not default_cache_path(tmp_path / "a.jsonl").exists()


async def test_a_configured_cache_path_is_used(tmp_path, server):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(3))
    cache_file = tmp_path / "elsewhere" / "judge.sqlite"
    await run_batch(source, tmp_path / "a.jsonl", config=judge_config(server), cache_path=cache_file)
    async with SQLiteJudgeCache(cache_file) as cache:
        assert await cache.count() == 2


async def test_buffered_writes_are_readable_before_and_after_they_are_committed(tmp_path):
    path = tmp_path / "cache.sqlite"
    async with SQLiteJudgeCache(path, write_batch=3) as cache:
        for i in range(4):
            await cache.put(f"k{i}", i)
        assert [await cache.get(f"k{i}") for i in range(4)] == [0, 1, 2, 3]
        assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM judge_replies").fetchone()[0] == 3
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM judge_replies").fetchone()[0] == 4
