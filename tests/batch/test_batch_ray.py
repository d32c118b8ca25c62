"""The Ray Data path on a local Ray instance: a few hundred rows, two actors, the stand-in judge."""

import json

import pytest

from reflection.batch._synthetic import synthetic_row, synthetic_rows, write_jsonl
from reflection.config import ReflectionConfig
from reflection.judge import JudgeConfig
from reflection.testing.server import StandInJudge

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from reflection.batch.ray import OUTPUT_COLUMNS, ReflectBatches, reflect_with_ray  # noqa: E402

ROWS = 300

# Ray's own DataContext warns about its deprecated settings; not ours to fix.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def test_map_batches_reflects_every_row_once_sharing_the_judge_concurrency(tmp_path, local_ray):
    source = write_jsonl(tmp_path / "in.jsonl", synthetic_rows(ROWS))
    with source.open("a") as f:
        f.write("not json\n")
    with StandInJudge(latency=0.01, idle_timeout=120) as server:
        config = ReflectionConfig(judge=JudgeConfig(base_url=server.base_url, model="stand-in"))
        out = reflect_with_ray(ray.data.read_text(str(source)), config, judge_concurrency=16, num_actors=2)
        rows = out.take_all()
        requests = server.requests
    assert set(rows[0]) == set(OUTPUT_COLUMNS)
    by_id = {r["id"]: r for r in rows}
    assert len(rows) == len(by_id) == ROWS + 1
    assert set(by_id) - {r["id"] for r in synthetic_rows(ROWS)} == {next(k for k in by_id if k.startswith("sha-"))}
    assert requests == 2 * ROWS // 3  # statically invalid rows never reach the judge
    for rid, row in by_id.items():
        full = json.loads(row["row"])
        assert full["id"] == rid and full.get("overall_valid") == row["overall_valid"]
        if rid.startswith("sha-"):
            assert row["error"].startswith("not valid JSON")
        else:
            assert (
                row["overall_valid"]
                is {"valid": True, "ungrounded": False, "static_invalid": False}[rid.rsplit("-", 1)[0]]
            )


def test_each_actor_gets_its_share_of_the_concurrency():
    assert ReflectBatches(ReflectionConfig(), judge_concurrency=64, num_actors=3).concurrency == 22


def test_a_batch_of_all_null_verdicts_keeps_the_boolean_column_type():
    actor = ReflectBatches(ReflectionConfig())
    try:
        out = actor({"text": ["not json", "[1]"]})
    finally:
        actor.close()
    assert str(out.schema.field("overall_valid").type) == "bool"
    assert out.column("overall_valid").to_pylist() == [None, None]
    first, second = out.column("error").to_pylist()
    assert first.startswith("not valid JSON: ") and second == "expected a JSON object row, got list"


def test_a_batch_of_columns_with_json_text_is_reflected_in_process():
    rows = [synthetic_row(i) for i in range(3)]
    actor = ReflectBatches(ReflectionConfig(), judge_concurrency=4)
    try:
        out = actor(
            {
                "id": [r["id"] for r in rows],
                "call": [json.dumps(r["call"]) for r in rows],
                "tools": [json.dumps(r["tools"]) for r in rows],
                "history": [json.dumps(r["history"]) for r in rows],
            }
        )
    finally:
        actor.close()
    assert tuple(out.schema.names) == OUTPUT_COLUMNS
    out = out.to_pydict()
    assert sorted(out["id"]) == sorted(r["id"] for r in rows)
    assert dict(zip(out["id"], out["overall_valid"], strict=True)) == {
        "valid-0": True,
        "ungrounded-1": True,
        "static_invalid-2": False,
    }
