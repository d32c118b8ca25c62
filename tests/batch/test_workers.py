"""`--workers N`: static-only rows reflected in worker processes give the same rows as one process."""

import json
import random

import anyio
import pytest
from typer.testing import CliRunner

from reflection import ReflectionConfig
from reflection.batch import _workers, run_batch
from reflection.batch._workers import reflect_in_processes, reflect_lines_in_processes
from reflection.cli import app
from reflection._resources import example_path

pytestmark = pytest.mark.slow  # processes, servers or a browser: `pytest -m "not slow"` leaves them out

runner = CliRunner()

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
]


def corpus_lines(n: int, seed: int = 3) -> list[str]:
    """Rows of every kind the output rules care about: repeated ids (also an id that looks
    like a renamed duplicate), rows without an id, bad JSON, rows that are not objects or
    lack a call, parallel calls, unknown tools and wrong types."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        kind = rng.choice(
            ["ok", "ok", "dup", "noid", "badjson", "notobj", "nocall", "parallel", "unknown", "type", "hashid"]
        )
        rid = f"r{i}" if kind != "dup" else f"r{rng.randrange(max(1, i))}"
        city = rng.choice(["Paris", "Oslo", "Lima"])
        row = {
            "id": rid,
            "tools": TOOLS,
            "history": [{"role": "user", "content": f"weather in {city}?"}],
            "call": {"name": "get_weather", "arguments": {"city": city}},
        }
        if kind == "badjson":
            lines.append('{"id": "broken", "call": ')
            continue
        if kind == "notobj":
            lines.append("[1, 2]")
            continue
        if kind == "noid":
            del row["id"]
        elif kind == "hashid":
            row["id"] = f"r{rng.randrange(max(1, i))}#2"
        elif kind == "nocall":
            del row["call"]
        elif kind == "parallel":
            del row["call"]
            row["tool_calls"] = [
                {"name": "get_weather", "arguments": {"city": city}},
                {"name": "search", "arguments": {"q": 3}},
            ]
        elif kind == "unknown":
            row["call"] = {"name": "get_wether", "arguments": {"city": city}}
        elif kind == "type":
            row["call"] = {"name": "get_weather", "arguments": {"city": 12, "unit": "k"}}
        lines.append(json.dumps(row))
        if rng.random() < 0.05:
            lines.append("   ")  # blank lines are skipped, and line numbers still count them
    return lines


def rows_of(path):
    """Output rows by id, latency aside; asserts every id is there once."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row.pop("latency_ms", None)
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == len(rows), "an id is written twice"
    return by_id


@pytest.fixture
def any_size(monkeypatch):
    """Worker processes for inputs of any size, in many chunks (the tests' files are small)."""
    monkeypatch.setattr(_workers, "MIN_INPUT_BYTES", 0)
    monkeypatch.setattr(_workers, "CHUNK_ROWS", 7)


def batch(src, out, workers, config=None, **options):
    config = config or ReflectionConfig()
    return anyio.run(lambda: run_batch(src, out, config=config, workers=workers, **options))


@pytest.mark.parametrize("flat", [False, True])
def test_generated_corpus_gives_the_same_rows_with_two_workers(tmp_path, any_size, flat):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(corpus_lines(300)) + "\n")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    stats_one, stats_two = batch(src, one, 1, flat=flat), batch(src, two, 2, flat=flat)
    assert rows_of(two) == rows_of(one)
    assert (stats_two.written, stats_two.duplicates) == (stats_one.written, stats_one.duplicates)
    assert stats_one.duplicates > 0
    rows = rows_of(one)
    assert any("#2" in rid for rid in rows) and any(rid.startswith("line-") for rid in rows)
    assert any(len(row.get("results", ())) == 2 for row in rows.values()) or flat


def odd_lines() -> list[bytes]:
    """Lines whose id only the full parse gets right (the workers parse, the parent names): BOMs,
    bytes that are not UTF-8, ids that are numbers, booleans, null, objects or repeated keys, an
    id naming another row's line, a lone surrogate, a call nesting too deep to parse, an
    overlong line (with a 12,000-byte limit)."""
    call = {"name": "get_weather", "arguments": {"city": "Oslo"}}

    def row(rid, **extra):
        return json.dumps({"id": rid, "tools": TOOLS, "call": call, **extra}).encode()

    return [
        b"\xef\xbb\xbf" + row("bom-first"),
        row(7),
        row("7"),
        row(7.0),
        row(True),
        row("True"),
        row(None),
        row([1]),
        row({"a": 1}),
        b"\xef\xbb\xbf" + row("bom-inside"),
        b"\xef\xbb\xbf   ",  # a BOM and blanks: a blank line
        b'{"id": "caf\xe9", "call": {}}',  # Latin-1, not UTF-8
        b'{"id": "a", "id": "b", "tools": [], "call": {"name": "x", "arguments": {}}}',
        row("line-17"),  # the name of a row without an id a few lines below
        row("ok-1"),
        row("ok-2"),
        json.dumps({"tools": TOOLS, "call": call}).encode(),  # line 17: no id
        b'{"id": "\\ud800", "call": {}}',
        row("long", history=[{"role": "user", "content": "x" * 20000}]),
        row("long"),  # the overlong line above is named line-19, so this id is not a duplicate
        b'{"id": "deep", "call": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        row(10**30),
        row(str(10**30)),
    ]


def test_odd_lines_give_the_same_rows_with_two_workers(tmp_path, any_size):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(odd_lines()) + b"\n")
    config = ReflectionConfig(max_line_bytes=12000)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    stats_one, stats_two = batch(src, one, 1, config), batch(src, two, 2, config)
    rows = rows_of(one)
    assert rows_of(two) == rows
    assert (stats_two.written, stats_two.duplicates) == (stats_one.written, stats_one.duplicates)
    assert {
        "bom-first",
        "bom-inside",
        "7",
        "7#2",
        "7.0",
        "True",
        "True#2",
        "b",
        "line-17",
        "line-17#2",
        "long",
        "line-19",
        str(10**30),
        f"{10**30}#2",
    } <= set(rows)
    assert "not valid UTF-8" in rows["line-12"]["error"] and "max_line_bytes" in rows["line-19"]["error"]
    resumed = tmp_path / "resumed.jsonl"  # resumed: the rows of some ids already written
    resumed.write_text(
        "".join(
            line + "\n"
            for line in one.read_text().splitlines()
            if json.loads(line)["id"] in {"7", "True", "line-17", "long", "line-12"}
        )
    )
    stats = batch(src, resumed, 2, config)
    assert stats.skipped == 5
    assert rows_of(resumed) == rows


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_both_start_methods_give_the_same_rows(tmp_path, any_size, monkeypatch, method):
    import multiprocessing

    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(corpus_lines(60, seed=4)) + "\n")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    batch(src, one, 1)
    monkeypatch.setattr(_workers, "_context", lambda: multiprocessing.get_context(method))
    batch(src, two, 2)
    assert rows_of(two) == rows_of(one)


def test_shipped_example_gives_the_same_rows_with_two_workers(tmp_path, any_size):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    batch(example_path("calls.jsonl"), one, 1)
    batch(example_path("calls.jsonl"), two, 2)
    assert rows_of(two) == rows_of(one)


def test_resumed_run_with_two_workers_completes_the_output_exactly(tmp_path, any_size):
    lines = corpus_lines(200, seed=5)
    src, partial = tmp_path / "in.jsonl", tmp_path / "part.jsonl"
    partial.write_text("\n".join(lines[:90]) + "\n")
    src.write_text("\n".join(lines) + "\n")
    once, resumed = tmp_path / "once.jsonl", tmp_path / "resumed.jsonl"
    batch(src, once, 1)
    batch(partial, resumed, 2)
    with resumed.open("a") as f:
        f.write('{"id": "r1", "overall_valid": null, "err')  # a row cut short by a killed run
    stats = batch(src, resumed, 2)
    assert stats.skipped > 0 and stats.truncated_bytes > 0
    assert rows_of(resumed) == rows_of(once)


@pytest.mark.parametrize("flat", [False, True])
def test_check_command_with_workers_writes_the_same_rows_and_counts(tmp_path, any_size, flat):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(corpus_lines(120, seed=9)) + "\n")
    outputs = {}
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}.jsonl"
        result = runner.invoke(
            app,
            ["check", str(src), "-o", str(out), "--static-only", "--workers", workers, *(["--flat"] if flat else [])],
        )
        assert result.exit_code == 0, result.output
        outputs[workers] = (rows_of(out), result.output.splitlines()[-1])
    assert outputs["2"] == outputs["1"]


def collect(items, config):
    async def run():
        return [line async for line in reflect_in_processes(items, config, workers=2)]

    return anyio.run(run)


def test_a_bug_in_a_worker_is_raised_in_the_parent(tmp_path):
    items = [5]  # not a prepared row: the worker's code fails on it (compiled by mypyc, at its argument's type)
    with pytest.raises((AttributeError, TypeError)):
        collect(items, ReflectionConfig())


def test_a_bug_in_a_worker_parsing_lines_is_raised_in_the_parent():
    async def run():
        return [row async for row in reflect_lines_in_processes([5], ReflectionConfig(), workers=2)]

    with pytest.raises(TypeError):  # not a (line number, line) pair
        anyio.run(run)


def test_workers_refuse_a_config_with_a_judge():
    config = ReflectionConfig(judge={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    with pytest.raises(ValueError, match="static checks and grounding only"):
        collect([], config)


def jsonl_line(number, tools, city="Oslo"):
    return number, json.dumps(
        {"id": f"r{number}", "tools": tools, "call": {"name": "get_weather", "arguments": {"city": city}}}
    ).encode()


def test_rows_offering_the_same_tool_list_go_to_the_same_worker():
    other = [{"name": "lookup", "parameters": {"type": "object", "properties": {}}}]

    def lists(block, part):
        return {json.dumps(json.loads(block[p][1])["tools"]) for p in part}

    router = _workers._Router(2)
    block = [jsonl_line(n, TOOLS if n % 2 else other) for n in range(1, 31)]
    parts = router.split(block)
    assert sorted(p for part in parts for p in part) == list(range(30))  # every row once
    assert all(part == sorted(part) for part in parts)  # in input order within a worker
    assert [len(lists(block, part)) for part in parts] == [1, 1]
    assert lists(block, parts[0]) != lists(block, parts[1])
    later = [jsonl_line(n, other) for n in range(31, 35)] + [jsonl_line(n, TOOLS) for n in range(35, 39)]
    again = router.split(later)  # the next blocks: each list goes back to the worker that had it
    assert lists(later, again[0]) == lists(block, parts[0]) and lists(later, again[1]) == lists(block, parts[1])


def test_one_tool_list_on_every_row_still_spreads_over_every_worker():
    parts = _workers._Router(3).split([jsonl_line(n, TOOLS) for n in range(1, 301)])
    assert all(80 <= len(part) <= 126 for part in parts)


def test_rows_that_cannot_be_routed_go_anywhere_and_are_still_reflected():
    parts = _workers._Router(2).split([5, (1, "not bytes"), (2, b"{}"), None])
    assert sorted(p for part in parts for p in part) == [0, 1, 2, 3]


def test_static_gc_sets_the_thresholds_and_restores_them():
    import gc

    before = gc.get_threshold()
    with _workers.static_gc():
        assert gc.get_threshold() == _workers.STATIC_GC_THRESHOLD
    assert gc.get_threshold() == before


def test_a_run_in_one_process_restores_the_collector_thresholds(tmp_path):
    import gc

    from reflection.batch.runner import static_lines

    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(corpus_lines(20)) + "\n")
    before = gc.get_threshold()
    seen = []

    async def run():
        async for _ in static_lines(src, ReflectionConfig(), workers=1):
            seen.append(gc.get_threshold())

    anyio.run(run)
    assert set(seen) == {_workers.STATIC_GC_THRESHOLD}
    assert gc.get_threshold() == before
