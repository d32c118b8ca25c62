"""Every static-only output path writes the same bytes for the same input (issue 15, item 1).

The Python API (`reflect_dataset`, each row written as `dumps(row) + "\\n"`), `reflection check
--static-only` and `reflection batch --static-only`, each with one worker and with two (worker
processes: inputs of at least `MIN_INPUT_BYTES`), full and `--flat`, must write identical lines
in input order, `latency_ms` (the row's own) aside. The inputs are generated corpora
(`tests/_sink_corpus.py`) covering every spec, call and history shape and every outcome; the
coverage tests below fail if the generator stops producing what the comparison relies on.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import importlib.metadata
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from typer.testing import CliRunner

import reflection
from reflection import ReflectionConfig, Reflector
from reflection._json import dumps, parse_json
from reflection.batch import _workers, reflect_dataset
from reflection.batch.inputs import jsonl_row
from reflection.cli import app
from reflection.model import STATIC_CHECKS
from reflection.rows import read_row, result_row

from _sink_corpus import KINDS, corpus, write_corpus

SEEDS = {1: 500, 2: 250, 3: 250}
"""Corpus seed -> rows. Every corpus is over `MIN_INPUT_BYTES`, so two workers really fork."""

runner = CliRunner()


# --- latency ---------------------------------------------------------------------------------

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[][{}]', re.DOTALL)


def neutral_latency(line: bytes) -> bytes:
    """`line` with the value of the row's own `latency_ms` (the first such key at the top level
    of the object: never text inside a string, never a key of nested user data) set to 0."""
    depth = 0
    for match in _TOKEN.finditer(line):
        token = match.group()
        if token[0] == 0x22:  # a string: a key when a colon follows
            if depth == 1 and token == b'"latency_ms"' and line[match.end() : match.end() + 1] == b":":
                start = end = match.end() + 1
                while line[end : end + 1] not in (b",", b"}"):
                    end += 1
                return line[:start] + b"0" + line[end:]
        elif token in (b"[", b"{"):
            depth += 1
        else:
            depth -= 1
    return line


def test_latency_is_neutralised_only_in_the_rows_own_key():
    row = {
        "id": 'x","latency_ms":5,"y \\"latency_ms\\":7',
        "overall_valid": True,
        "warnings": ['"latency_ms":1'],
        "latency_ms": 12.345,
        "results": [{"call": {"arguments": {"latency_ms": 9}}}],
    }
    line = (dumps(row) + "\n").encode()
    out = json.loads(neutral_latency(line))
    assert out == {**row, "latency_ms": 0}
    assert neutral_latency(line).endswith(b"\n")
    error = (dumps({"id": '"latency_ms":3', "overall_valid": None, "error": "x"}) + "\n").encode()
    assert neutral_latency(error) == error


# --- the sinks -------------------------------------------------------------------------------


def api_lines(path: Path, flat: bool) -> list[bytes]:
    """What the Python API gives for `path`: each row of `reflect_dataset` as a JSON line."""
    return api_lines_with(path, ReflectionConfig(), flat)


def api_lines_with(path: Path, config: ReflectionConfig, flat: bool = False) -> list[bytes]:
    assert config.judge is None, "the environment configures a judge; these tests are static-only"

    async def collect() -> list[bytes]:
        return [(dumps(row) + "\n").encode() async for row in reflect_dataset(path, config=config, flat=flat)]

    return anyio.run(collect)


def cli(*args: str) -> None:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)


def check_lines(path: Path, out: Path, workers: int, flat: bool) -> list[bytes]:
    cli("check", str(path), "--static-only", "-o", str(out), "--workers", str(workers), *(["--flat"] if flat else []))
    return out.read_bytes().splitlines(keepends=True)


def batch_lines(path: Path, out: Path, workers: int, flat: bool) -> list[bytes]:
    cli(
        "batch",
        str(path),
        "--static-only",
        "-o",
        str(out),
        "--no-progress",
        "--workers",
        str(workers),
        *(["--flat"] if flat else []),
    )
    return out.read_bytes().splitlines(keepends=True)


def assert_same_lines(got: list[bytes], expected: list[bytes]) -> None:
    """Line-for-line equality, latency aside, naming the first line that differs."""
    got, expected = [neutral_latency(line) for line in got], [neutral_latency(line) for line in expected]
    for number, (mine, theirs) in enumerate(zip(got, expected), start=1):
        assert mine == theirs, f"output line {number} differs:\n  got      {mine!r}\n  expected {theirs!r}"
    assert len(got) == len(expected), f"{len(got)} lines written, {len(expected)} expected"


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("corpora")
    paths = {}
    for seed, rows in SEEDS.items():
        paths[seed] = folder / f"corpus-{seed}.jsonl"
        write_corpus(paths[seed], rows, seed)
    return paths


@pytest.fixture(scope="module")
def expected(corpora: dict[int, Path]) -> dict[tuple[int, bool], list[bytes]]:
    """The Python API's lines for each (seed, flat): what every other path must write."""
    return {(seed, flat): api_lines(path, flat) for seed, path in corpora.items() for flat in (False, True)}


# --- the corpora cover what the comparison relies on -------------------------------------------


def test_corpus_is_deterministic():
    assert corpus(60, 7) == corpus(60, 7)
    assert corpus(60, 7) != corpus(60, 8)
    assert len(corpus(5, 1)) >= len(KINDS)  # one row of every kind, however small the corpus


def test_every_corpus_is_large_enough_for_worker_processes(corpora):
    for path in corpora.values():
        assert path.stat().st_size >= _workers.MIN_INPUT_BYTES
        assert _workers.use_processes(path, ReflectionConfig(), 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_corpus_covers_every_outcome(seed, corpora, expected):
    lines = expected[seed, False]
    rows = [json.loads(line) for line in lines]
    seen: collections.Counter[str] = collections.Counter()
    for line, row in zip(lines, rows):
        try:
            orjson.dumps(row)
        except TypeError:  # an integer beyond 64 bits: the line was written by the stdlib fallback
            seen["stdlib fallback"] += 1
        if not line.isascii():
            seen["non-ASCII"] += 1
        if row["id"].startswith("line-"):
            seen["id from line number"] += 1
        if "latency_ms" in row["id"]:
            seen["id mentioning latency_ms"] += 1
        if "error" in row:
            seen["error row"] += 1
            if not line.isascii():
                seen["error row with non-ASCII"] += 1
            error = row["error"]
            for phrase in (
                "is not valid JSON",
                "is not valid UTF-8",
                "duplicate id",
                'no "call" or "tool_calls"',
                '"tool_calls" must be a list',
                "expected a JSON object",
            ):
                if phrase in error:
                    seen[f"error: {phrase}"] += 1
            continue
        results = row["results"]
        if len(results) > 1:
            seen["parallel"] += 1
        if row["warnings"]:
            seen["warnings"] += 1
        if any(w.startswith("history") or w.startswith("the history") for w in row["warnings"]):
            seen["history warning"] += 1
        if any(w.startswith("ignored a tool spec") for w in row["warnings"]):
            seen["spec warning"] += 1
        if row["overall_valid"] is True:
            seen["valid"] += 1
        for result in results:
            static = result["static"]
            failing = [name for name, check in static["checks"].items() if not check["passed"]]
            for name in failing:
                seen[f"fails {name}"] += 1
            if len(failing) >= 3:
                seen["several failing checks"] += 1
            if any(len(check["findings"]) > 20 for check in static["checks"].values()):
                seen["more than 20 findings"] += 1
            if static["correction"] is not None:
                seen["correction"] += 1
            if any("Did you mean" in f["message"] for check in static["checks"].values() for f in check["findings"]):
                seen["did you mean"] += 1
            for value in result["grounding"]:
                for source in value["sources"]:
                    seen[f"source {source['kind']}"] += 1
                if not value["sources"]:
                    seen["ungrounded value"] += 1
    wanted = (
        {f"fails {name}" for name in STATIC_CHECKS}
        | {f"source {kind}" for kind in ("user", "assistant", "tool", "system", "default", "enum")}
        | {
            "stdlib fallback",
            "non-ASCII",
            "error row with non-ASCII",
            "id from line number",
            "id mentioning latency_ms",
            "error row",
            "parallel",
            "warnings",
            "history warning",
            "spec warning",
            "valid",
            "several failing checks",
            "more than 20 findings",
            "correction",
            "did you mean",
            "ungrounded value",
            "error: is not valid JSON",
            "error: is not valid UTF-8",
            "error: duplicate id",
            'error: no "call" or "tool_calls"',
            'error: "tool_calls" must be a list',
            "error: expected a JSON object",
        }
    )
    assert not wanted - set(seen), f"seed {seed} lacks {sorted(wanted - set(seen))}"


# --- every path writes the API's bytes ------------------------------------------------------------


def _paths(seeds: list[int], flat: tuple[bool, ...] = (False, True), workers: tuple[int, ...] = (1, 2)) -> list[Any]:
    return [
        pytest.param(seed, w, f, id=f"seed{seed}-w{w}-{'flat' if f else 'full'}")
        for seed in seeds
        for w in workers
        for f in flat
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "workers", "flat"), _paths(list(SEEDS)))
def test_check_writes_what_the_api_gives(seed, workers, flat, corpora, expected, tmp_path):
    assert_same_lines(check_lines(corpora[seed], tmp_path / "out.jsonl", workers, flat), expected[seed, flat])


# `batch` shares the rows with `check` and differs in how it writes them: every variant on one
# corpus, the worker path on the others.
@pytest.mark.slow
@pytest.mark.parametrize(("seed", "workers", "flat"), _paths([1]) + _paths([2, 3], flat=(False,), workers=(2,)))
def test_batch_writes_what_the_api_gives(seed, workers, flat, corpora, expected, tmp_path):
    assert_same_lines(batch_lines(corpora[seed], tmp_path / "out.jsonl", workers, flat), expected[seed, flat])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_check_to_stdout_writes_what_the_api_gives(workers, corpora, expected):
    result = runner.invoke(app, ["check", str(corpora[3]), "--static-only", "--workers", str(workers)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert_same_lines(result.stdout_bytes.splitlines(keepends=True), expected[3, False])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_lines_over_max_line_bytes_are_the_same_error_rows_everywhere(workers, corpora, tmp_path):
    """A config's `max_line_bytes` makes long lines error rows (the workers get their message,
    not the line); every path agrees on which and how."""
    limit = 6000
    assert any(len(line) > limit for line in corpora[2].read_bytes().splitlines())
    config = tmp_path / "config.yaml"
    config.write_text(f"max_line_bytes: {limit}\n")
    expected = api_lines_with(corpora[2], ReflectionConfig(max_line_bytes=limit))
    assert any(b"max_line_bytes" in line for line in expected)
    cli(
        "check",
        str(corpora[2]),
        "--static-only",
        "--config",
        str(config),
        "-o",
        str(tmp_path / "check.jsonl"),
        "--workers",
        str(workers),
    )
    assert_same_lines((tmp_path / "check.jsonl").read_bytes().splitlines(keepends=True), expected)
    cli(
        "batch",
        str(corpora[2]),
        "--static-only",
        "--config",
        str(config),
        "-o",
        str(tmp_path / "batch.jsonl"),
        "--no-progress",
        "--workers",
        str(workers),
    )
    assert_same_lines((tmp_path / "batch.jsonl").read_bytes().splitlines(keepends=True), expected)


def test_check_in_many_small_chunks_writes_what_the_api_gives(corpora, expected, tmp_path, monkeypatch):
    monkeypatch.setattr(_workers, "CHUNK_ROWS", 7)  # many chunks in flight, their seams all over the corpus
    assert_same_lines(check_lines(corpora[2], tmp_path / "out.jsonl", 2, False), expected[2, False])


@pytest.mark.slow
def test_the_reflection_command_writes_what_the_api_gives(corpora, expected, tmp_path):
    """The installed entry point in a fresh process: cold caches, workers forked from a
    single-threaded parent."""
    out = tmp_path / "out.jsonl"
    env = {
        **os.environ,
        # The package this process imported (the checkout, or an installed build under test).
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(reflection.__file__).parents[1]), os.environ.get("PYTHONPATH")])
        ),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reflection.cli",
            "check",
            str(corpora[1]),
            "--static-only",
            "-o",
            str(out),
            "--workers",
            "2",
        ],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert_same_lines(out.read_bytes().splitlines(keepends=True), expected[1, False])


@pytest.mark.slow
def test_check_on_a_json_array_writes_what_the_api_gives(corpora, tmp_path):
    """A JSON array is read and prepared in the parent, which sends prepared rows to the workers."""
    elements = []
    for line in corpora[2].read_bytes().removeprefix(b"\xef\xbb\xbf").splitlines():
        try:
            parse_json(line)
        except ValueError:  # not JSON, not UTF-8, a lone surrogate or too deep: see the xfails below
            continue
        if line.strip():
            elements.append(line)
    array = tmp_path / "corpus.json"
    array.write_bytes(b"[" + b",\n".join(elements) + b"]")
    assert array.stat().st_size >= _workers.MIN_INPUT_BYTES
    expected = api_lines(array, False)
    for workers in (1, 2):
        assert_same_lines(check_lines(array, tmp_path / f"out-{workers}.jsonl", workers, False), expected)


@pytest.mark.parametrize(
    ("seed", "flat"),
    [(1, False), (1, True), (2, False), (3, False)],
    ids=["seed1-full", "seed1-flat", "seed2-full", "seed3-full"],
)
def test_reflector_and_result_row_give_the_rows_reflect_dataset_gives(seed, flat, corpora, expected):
    """The model path by hand: each input row read (`jsonl_row`, `read_row`), reflected by
    `Reflector.reflect` and turned into its row by `rows.result_row`, as a Python user would;
    error rows (the reader's and the id rules') are `reflect_dataset`'s alone and are skipped."""
    lines = expected[seed, flat]
    reflector = Reflector(ReflectionConfig())
    assert reflector.judge is None
    numbered = enumerate(corpora[seed].read_bytes().splitlines(keepends=True), start=1)
    sources = [source for number, line in numbered if (source := jsonl_row(number, line)) is not None]
    assert len(sources) == len(lines)

    async def rows() -> list[tuple[bytes, bytes]]:
        pairs = []
        for source, line in zip(sources, lines):
            written = json.loads(line)
            if "error" in written:
                continue
            row = read_row(source.raw, source.position)
            result = await reflector.reflect(row.call, row.tools, row.history)
            mine = result_row(written["id"], result, latency_ms=0.0, flat_only=flat)
            pairs.append(((dumps(mine) + "\n").encode(), line))
        return pairs

    pairs = anyio.run(rows)
    assert len(pairs) > len(lines) // 2
    assert_same_lines([mine for mine, _ in pairs], [line for _, line in pairs])


def test_the_models_built_from_the_plain_data_are_the_models_validation_builds(corpora):
    """The Python API's sink builds its results from the checker's plain data without
    validation (`StaticResult.from_data`, `ValueGrounding.from_data`): every result must equal,
    field for field, the one pydantic builds by validating the same values."""
    reflector = Reflector(ReflectionConfig())
    numbered = enumerate(corpora[1].read_bytes().splitlines(keepends=True), start=1)
    sources = [
        source for number, line in numbered if (source := jsonl_row(number, line)) is not None and source.error is None
    ]

    async def results() -> list[Any]:
        found = []
        for source in sources:
            try:
                row = read_row(source.raw, source.position)
                result = await reflector.reflect(row.call, row.tools, row.history)
            except (TypeError, ValueError):  # error rows: nothing built
                continue
            found.extend(result if isinstance(result, list) else [result])
        return found

    built = anyio.run(results)
    assert len(built) > 400
    for result in built:
        fields = result.model_dump()
        del fields["static"]["valid"]  # computed fields: in the dump, not accepted back
        for item in fields["grounding"]:
            del item["grounded"]
        validated = type(result).model_validate(fields)
        assert validated == result and validated.model_dump() == result.model_dump(), result.call


# --- JSON-array elements every reader path once got wrong ---


def test_a_json_array_element_with_a_lone_surrogate_in_its_id_becomes_an_error_row_named_by_position(tmp_path):
    source = tmp_path / "in.json"
    source.write_bytes(b'[{"id": "a\\ud800", "call": {"name": "ping"}}, {"id": "b", "call": {"name": "ping"}}]')
    lines = check_lines(source, tmp_path / "out.jsonl", 1, True)
    assert [json.loads(line)["id"] for line in lines] == ["line-1", "b"]
    assert "element 1 of in.json is not valid JSON" in json.loads(lines[0])["error"]


def test_a_json_array_element_nesting_too_deep_is_read_as_the_same_json_lines_row_is(tmp_path):
    deep = b"[" * 1500 + b"]" * 1500
    rows = [
        b'{"id": "a", "call": {"name": "ping"}, "history": ' + deep + b"}",
        b'{"id": "b", "call": {"name": "ping"}}',
    ]
    array, lines = tmp_path / "in.json", tmp_path / "in.jsonl"
    array.write_bytes(b"[" + b", ".join(rows) + b"]")
    lines.write_bytes(b"\n".join(rows) + b"\n")
    got = check_lines(array, tmp_path / "out-array.jsonl", 1, False)
    assert len(got) == 2 and "history was skipped" in json.loads(got[0])["warnings"][0]
    assert_same_lines(got, check_lines(lines, tmp_path / "out-lines.jsonl", 1, False))


def test_tools_given_as_a_json_string_are_read_alike_from_json_lines_and_a_json_array(tmp_path):
    tools = [{"name": "ping", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}]
    rows = [
        {"id": "a", "tools": json.dumps(tools), "call": {"name": "ping", "arguments": {"n": 1}}},
        {"id": "b", "tools": json.dumps(tools), "call": {"name": "ping", "arguments": {"n": "x"}}},
    ]
    array, lines = tmp_path / "in.json", tmp_path / "in.jsonl"
    array.write_text(json.dumps(rows))
    lines.write_text("".join(json.dumps(row) + "\n" for row in rows))
    got = check_lines(lines, tmp_path / "out-lines.jsonl", 1, True)
    assert [json.loads(line)["overall_valid"] for line in got] == [True, False]
    assert_same_lines(got, check_lines(array, tmp_path / "out-array.jsonl", 1, True))


def test_csv_columns_nesting_too_deep_are_read_as_the_same_json_lines_members_are(tmp_path):
    deep = "[" * 1500 + "]" * 1500
    tools = json.dumps([{"name": "ping"}])
    cells = [
        {"id": "a", "tools": tools, "history": deep, "call": json.dumps({"name": "ping"})},
        {"id": "b", "tools": tools, "history": "[]", "call": deep},
        {"id": "c", "tools": deep, "history": "[]", "call": json.dumps({"name": "ping"})},
    ]
    table, lines = tmp_path / "in.csv", tmp_path / "in.jsonl"
    with table.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "tools", "history", "call"])
        writer.writeheader()
        writer.writerows(cells)
    lines.write_text(
        "".join(
            "{" + ", ".join(f'"{k}": {v if k != "id" else json.dumps(v)}' for k, v in row.items()) + "}\n"
            for row in cells
        )
    )
    got = check_lines(table, tmp_path / "out-csv.jsonl", 1, False)
    assert [json.loads(line).get("error") for line in got] == [None, None, None]
    assert_same_lines(got, check_lines(lines, tmp_path / "out-lines.jsonl", 1, False))


# --- the output has not changed since the golden digests were recorded -----------------------------

GOLDEN = Path(__file__).with_name("sink_golden.json")
"""Per-line digests of the API's output on corpus seed 1 (full and flat), latency aside, with the
versions that wrote it. Comparing the sinks with each other cannot see a change both share; this can."""

_GOLDEN_PACKAGES = ("orjson", "msgspec", "jsonschema-rs", "pydantic", "pydantic-core")


def _versions() -> dict[str, str]:
    return {
        "python": "%d.%d" % sys.version_info[:2],
        **{name: importlib.metadata.version(name) for name in _GOLDEN_PACKAGES},
    }


def _digests(lines: list[bytes]) -> list[str]:
    return [hashlib.blake2b(neutral_latency(line), digest_size=8).hexdigest() for line in lines]


def write_golden(path: Path) -> None:
    """Record the golden digests from today's code (run this file as a script to do so)."""
    corpus_path = path.with_name("_golden_corpus.jsonl")
    write_corpus(corpus_path, SEEDS[1], 1)
    try:
        record = {
            "seed": 1,
            "rows": SEEDS[1],
            "versions": _versions(),
            "full": _digests(api_lines(corpus_path, False)),
            "flat": _digests(api_lines(corpus_path, True)),
        }
    finally:
        corpus_path.unlink()
    path.write_text(json.dumps(record, indent=0) + "\n")


@pytest.mark.parametrize("flat", [False, True], ids=["full", "flat"])
def test_output_is_what_it_was_when_the_golden_digests_were_recorded(flat, expected):
    """Runs everywhere, CI's fresh install included (it never skips): the recorded versions are
    only reported. Most of the output is this project's own text; a dependency's new release
    (the validator's messages, mostly) fails this only where it really changes what users get,
    and the failure says how to re-record."""
    golden = json.loads(GOLDEN.read_text())
    assert (golden["seed"], golden["rows"]) == (1, SEEDS[1])
    problem = _golden_problem(golden, expected[1, flat], flat)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def _golden_problem(golden: dict[str, Any], lines: list[bytes], flat: bool) -> str | None:
    """What differs from the recorded digests, with how to re-record; None when nothing does."""
    recorded = golden["flat" if flat else "full"]
    changed = [number for number, (digest, was) in enumerate(zip(_digests(lines), recorded), start=1) if digest != was]
    if not changed and len(lines) == len(recorded):
        return None
    where = (
        f"output line {changed[0]} of corpus seed 1 changed ({len(changed)} line(s) in all); it is now "
        f"{lines[changed[0] - 1]!r}"
        if changed
        else f"corpus seed 1 gave {len(lines)} lines, {len(recorded)} recorded"
    )
    moved = {
        name: (golden["versions"].get(name), now)
        for name, now in _versions().items()
        if golden["versions"].get(name) != now
    }
    because = (
        f" The versions differ from the recorded ones ({', '.join(f'{k} {a} -> {b}' for k, (a, b) in moved.items())}): "
        "if the change comes from a dependency's new release, check it is one users may get."
        if moved
        else ""
    )
    return (
        f"{where}, since the golden digests were recorded.{because} If the change is deliberate, re-record "
        "them on this commit: PYTHONPATH=. python tests/test_sinks.py"
    )


def test_the_golden_guard_fails_with_a_re_record_instruction_whatever_the_versions(expected):
    golden = json.loads(GOLDEN.read_text())
    lines = expected[1, False]
    assert _golden_problem(golden, lines, False) is None
    altered = {
        **golden,
        "versions": {**golden["versions"], "pydantic": "0.0.1"},
        "full": ["0" * 16, *golden["full"][1:]],
    }
    problem = _golden_problem(altered, lines, False)
    assert problem is not None and problem.startswith("output line 1 of corpus seed 1 changed (1 line(s) in all)")
    assert (
        "pydantic 0.0.1 -> " in problem
        and "re-record them on this commit: PYTHONPATH=. python tests/test_sinks.py" in problem
    )
    assert _golden_problem({**golden, "versions": {}}, lines, False) is None  # other versions alone never fail it


# --- resume: the id rules are the same with and without workers ------------------------------------


def _by_id(lines: list[bytes]) -> dict[str, bytes]:
    return {json.loads(line)["id"]: line for line in lines}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_batch_resumes_an_output_holding_some_ids(workers, corpora, expected, tmp_path):
    """An output already holding a scattered subset of the rows (duplicates' renamed ids, ids
    from line numbers and first occurrences among them) gets exactly the others appended, in
    input order, as the API gives them."""
    full = expected[1, False]
    rng = random.Random(5)
    kept = [line for number, line in enumerate(full) if number < 30 or rng.random() < 0.3]
    kept_ids = set(_by_id(kept))
    assert any("#" in rid for rid in kept_ids) and any(rid.startswith("line-") for rid in kept_ids)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"".join(kept))
    written = batch_lines(corpora[1], out, workers, False)
    assert_same_lines(written, kept + [line for rid, line in _by_id(full).items() if rid not in kept_ids])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_batch_run_again_on_its_own_output_writes_nothing(workers, corpora, tmp_path):
    out = tmp_path / "out.jsonl"
    first = batch_lines(corpora[3], out, workers, True)
    assert batch_lines(corpora[3], out, workers, True) == first


if __name__ == "__main__":  # re-record the golden digests from this checkout's code
    write_golden(GOLDEN)
    print(f"wrote {GOLDEN}")
