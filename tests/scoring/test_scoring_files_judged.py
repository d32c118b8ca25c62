"""`ascore_files` and `reflection score` with a judge: the judged metrics, judge failures,
no judge, order under concurrency and the cache. The judge is mocked at the HTTP layer
(respx, and `reflection.testing.FakeJudge`), so the real client runs: requests, retries,
validation and usage."""

import asyncio
import json
from pathlib import Path
from typing import Self

import httpx
import respx
from test_scoring_cli import app, write  # the score command's test app and row writer
from typer.testing import CliRunner

from reflection.judge import Judge, JudgeConfig
from reflection.scoring import JUDGED_KEYS, SCORE_KEYS, ascore_files, score_files

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scoring"
PREDICTIONS, REFERENCES = EXAMPLES / "predictions.jsonl", EXAMPLES / "references.jsonl"
BASE = "http://score-judge.test/v1"
ROW_KEYS = [
    "id",
    "expected_tool",
    "predicted_tool",
    *SCORE_KEYS,
    *JUDGED_KEYS,
    "no_call",
    "unknown_tool",
    "error",
    "judge_error",
    "judge_usage",
]
# Rows of the example files that have something to judge: an answer and a reference answer,
# or available tools in the reference.
JUDGED_IDS = {"weather-1", "weather-2", "search-1", "no-call-1", "unknown-1", "chitchat-1"}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def judge_config_file(tmp_path: Path, base_url: str, model: str) -> Path:
    """Two attempts and no waiting between them, so failing judges fail fast."""
    path = tmp_path / "config.yaml"
    path.write_text(
        f"judge:\n  base_url: {base_url}\n  model: {model}\n  max_attempts: 2\n  retry_max_wait: 0\n", encoding="utf-8"
    )
    return path


def run(*args: str):
    return CliRunner().invoke(app(), ["score", *map(str, args)])


def rows_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def shown(request: httpx.Request) -> dict:
    """The decoded `<data>` block of a judge request: what the judge was shown."""
    user = json.loads(request.content)["messages"][1]["content"]
    return json.loads(user.split("<data>\n", 1)[1].split("\n</data>", 1)[0])


def reply(score: int, explanation: str) -> httpx.Response:
    content = json.dumps({"explanation": explanation, "score": score})
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        },
    )


class ScoringJudge:
    """A judge at BASE that scores from what it is shown, so its replies do not depend on the
    order requests arrive in. Response correctness: 5 when the answer is the reference
    answer, else 3 (0.5). Tool selection: 1 (0.0) when no tool was called, else 4 (0.75).
    Metrics named in `fail` ("response", "selection") get HTTP 500 instead."""

    def __init__(self, fail: tuple[str, ...] = ()):
        self.fail = set(fail)
        self.asked: list[tuple[str, dict]] = []
        self.router = respx.mock(base_url=BASE, assert_all_called=False)
        self.router.post("/chat/completions").mock(side_effect=self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        data = shown(request)
        metric = "response" if "reference_answer" in data else "selection"
        self.asked.append((metric, data))
        if metric in self.fail:
            return httpx.Response(500, json={"error": {"message": "scripted failure"}})
        if metric == "response":
            score = 5 if data["agent_answer"] == data["reference_answer"] else 3
        else:
            score = 4 if data["tool_calls_made"] else 1
        return reply(score, f"{metric} scored {score}")

    def __enter__(self) -> Self:
        self.router.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.router.__exit__(*exc_info)


# --- with a judge ----------------------------------------------------------------------------


def test_a_judge_adds_response_correctness_and_judged_tool_selection(tmp_path):
    out = tmp_path / "rows.jsonl"
    with ScoringJudge() as judge:
        result = run(PREDICTIONS, "--references", REFERENCES, "-o", out, "--base-url", BASE, "--model", "m")
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in rows_of(out.read_text()) if r["trajectory_correctness"] is not None}
    weather = rows["weather-1"]
    assert weather["response_correctness"] == 0.5  # "It's 68°F ..." is not word for word "It is 68°F ..."
    assert (weather["trajectory_match"], weather["tool_selection_judged"], weather["trajectory_correctness"]) == (
        1.0,
        0.75,
        0.75,
    )
    assert weather["judge_error"] is None
    assert weather["judge_usage"]["requests"] == 2
    assert (rows["chitchat-1"]["response_correctness"], rows["chitchat-1"]["tool_selection_judged"]) == (1.0, None)
    assert rows["no-call-1"]["tool_selection_judged"] == 0.0
    assert all(rows["agent-1"][key] is None for key in (*JUDGED_KEYS, "judge_usage"))  # nothing to judge
    assert len(judge.asked) == 8
    assert "judge requests" in result.stdout


def test_trajectory_correctness_is_the_minimum_of_the_reference_match_and_the_judged_selection(tmp_path):
    plain = {r["id"]: r for r in score_files(PREDICTIONS, REFERENCES) if r["trajectory_correctness"] is not None}
    out = tmp_path / "rows.jsonl"
    with ScoringJudge():
        run(PREDICTIONS, "--references", REFERENCES, "-o", out, "--base-url", BASE, "--model", "m")
    judged = [r for r in rows_of(out.read_text()) if r["tool_selection_judged"] is not None]
    assert {r["id"] for r in judged} == {"weather-1", "weather-2", "search-1", "no-call-1", "unknown-1"}
    for row in judged:
        assert row["trajectory_match"] == plain[row["id"]]["trajectory_correctness"]
        assert row["trajectory_correctness"] == min(row["trajectory_match"], row["tool_selection_judged"])


def test_the_judge_is_shown_the_query_the_answers_and_the_available_tools(tmp_path):
    predictions = write(
        tmp_path / "p.jsonl",
        [{"id": 1, "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "response": "Rain."}],
    )
    references = write(
        tmp_path / "r.jsonl",
        [
            {
                "id": 1,
                "query": "Weather in Oslo?",
                "tools": [WEATHER_TOOL],
                "expected_response": "Rainy.",
                "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
            }
        ],
    )
    with ScoringJudge() as judge:
        run(predictions, "--references", references, "--base-url", BASE, "--model", "m")
    asked = dict(judge.asked)
    assert asked["response"] == {
        "user_request": "Weather in Oslo?",
        "agent_answer": "Rain.",
        "reference_answer": "Rainy.",
    }
    assert asked["selection"]["user_request"] == "Weather in Oslo?"
    assert [t["name"] for t in asked["selection"]["available_tools"]] == ["get_weather"]
    assert asked["selection"]["tool_calls_made"] == [{"name": "get_weather", "arguments": {"city": "Oslo"}}]


def test_the_json_summary_has_the_judged_metrics_and_the_judge_traffic(tmp_path):
    with ScoringJudge():
        result = run(
            PREDICTIONS,
            "--references",
            REFERENCES,
            "-o",
            tmp_path / "rows.jsonl",
            "--base-url",
            BASE,
            "--model",
            "m",
            "--json-summary",
        )
    summary = json.loads(result.stdout)
    assert summary["metrics"]["response_correctness"] == {"mean": 2 / 3, "n": 3}  # 0.5, 0.5 and 1.0
    assert summary["metrics"]["tool_selection_judged"]["n"] == 5
    assert summary["judge"] == {
        "configured": True,
        "error_rows": 0,
        "requests": 8,
        "prompt_tokens": 800,
        "completion_tokens": 80,
        "cached_tokens": 0,
        "cost_usd": None,
    }  # model "m": no price


# --- judge failures --------------------------------------------------------------------------


def test_a_judge_that_always_fails_gives_judge_errors_and_the_run_goes_on(tmp_path, fake_judge):
    fake_judge.fail(500, times=1000)
    out = tmp_path / "rows.jsonl"
    config = judge_config_file(tmp_path, fake_judge.base_url, fake_judge.model)
    result = run(PREDICTIONS, "--references", REFERENCES, "-o", out, "--config", config, "--json-summary")
    assert result.exit_code == 0, result.output
    plain = list(score_files(PREDICTIONS, REFERENCES))
    rows = rows_of(out.read_text())
    assert [r["id"] for r in rows] == [r["id"] for r in plain]
    for row, expected in zip(rows, plain, strict=True):
        assert all(row[key] is None for key in JUDGED_KEYS)
        assert {k: v for k, v in row.items() if k not in ("judge_error", "judge_usage")} == {
            k: v for k, v in expected.items() if k not in ("judge_error", "judge_usage")
        }
        if row["id"] in JUDGED_IDS and row["trajectory_correctness"] is not None:
            assert "HTTP 500 from the judge endpoint: fake judge status 500 (after 2 request(s))" in row["judge_error"]
            assert row["judge_usage"]["requests"] in (2, 4)  # two attempts per judged metric
        else:
            assert row["judge_error"] is None
    weather = next(r for r in rows if r["id"] == "weather-1")
    assert weather["judge_error"].startswith("response_correctness: HTTP 500")
    assert "; tool_selection_judged: HTTP 500" in weather["judge_error"]
    summary = json.loads(result.stdout)
    assert (summary["judge"]["error_rows"], summary["judge"]["requests"]) == (6, 16)
    assert len(fake_judge.requests) == 16


def test_one_failing_judged_metric_keeps_the_other(tmp_path):
    config = judge_config_file(tmp_path, BASE, "m")
    out = tmp_path / "rows.jsonl"
    with ScoringJudge(fail=("response",)):
        run(PREDICTIONS, "--references", REFERENCES, "-o", out, "--config", config)
    weather = next(r for r in rows_of(out.read_text()) if r["id"] == "weather-1")
    assert (weather["response_correctness"], weather["tool_selection_judged"]) == (None, 0.75)
    assert (
        weather["judge_error"]
        == "response_correctness: HTTP 500 from the judge endpoint: scripted failure (after 2 request(s))"
    )


def test_an_invalid_judge_configuration_is_a_usage_error(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("judge:\n  max_attempts: 0\n", encoding="utf-8")
    result = run(PREDICTIONS, "--references", REFERENCES, "--config", config)
    assert result.exit_code == 2
    assert "invalid configuration" in result.stderr


# --- without a judge -------------------------------------------------------------------------


def test_without_a_judge_the_new_keys_are_null_and_the_rest_is_unchanged(tmp_path):
    predictions = write(
        tmp_path / "p.jsonl",
        [{"id": 1, "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "response": "Rainy."}],
    )
    references = write(
        tmp_path / "r.jsonl",
        [
            {
                "id": 1,
                "query": "Weather in Oslo?",
                "tools": [WEATHER_TOOL],
                "expected_response": "Rainy.",
                "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
            }
        ],
    )
    result = run(predictions, "--references", references, "--json-summary")
    assert result.exit_code == 0, result.output
    (row,) = rows_of(result.stdout)
    assert list(row) == ROW_KEYS
    assert row == {
        "id": "1",
        "expected_tool": "get_weather",
        "predicted_tool": "get_weather",
        "tool_call_equivalence": 1.0,
        "binary_tool_call": 1.0,
        "staged_tool_call": 1.0,
        "tool_selection_accuracy": 1.0,
        "parameter_accuracy": 1.0,
        "execution_success": 1.0,
        "trajectory_correctness": 1.0,
        "response_exact_match": 1.0,
        "response_rouge_l": 1.0,
        "response_meteor": 0.5,  # one matched word: METEOR's fragmentation penalty halves it
        "response_correctness": None,
        "tool_selection_judged": None,
        "trajectory_match": None,
        "no_call": False,
        "unknown_tool": False,
        "error": None,
        "judge_error": None,
        "judge_usage": None,
    }
    assert json.loads(result.stderr)["judge"]["configured"] is False  # stderr is still one JSON object


def test_without_a_judge_the_command_writes_what_score_files_gives(tmp_path):
    out = tmp_path / "rows.jsonl"
    result = run(PREDICTIONS, "--references", REFERENCES, "-o", out)
    assert result.exit_code == 0, result.output
    assert rows_of(out.read_text()) == list(score_files(PREDICTIONS, REFERENCES))
    assert "judged metrics skipped: no judge configured" in " ".join(result.stdout.split())


def test_without_a_judge_the_json_summary_says_the_judge_was_not_configured(tmp_path):
    result = run(PREDICTIONS, "--references", REFERENCES, "-o", tmp_path / "rows.jsonl", "--json-summary")
    summary = json.loads(result.stdout)
    assert summary["judge"] == {
        "configured": False,
        "error_rows": 0,
        "requests": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "cost_usd": 0.0,
    }
    assert all(summary["metrics"][key] == {"mean": None, "n": 0} for key in JUDGED_KEYS)


def test_score_files_leaves_the_judged_metrics_null():
    rows = list(score_files(PREDICTIONS, REFERENCES))
    assert all(list(row) == ROW_KEYS for row in rows)
    assert all(row[key] is None for row in rows for key in (*JUDGED_KEYS, "judge_error", "judge_usage"))


# --- order, concurrency, cache ---------------------------------------------------------------


async def test_rows_keep_input_order_and_every_id_once_when_judged_concurrently(tmp_path):
    lines: list = []
    for i in range(24):
        answer = f"answer {i}"
        lines.append({"id": f"r{i}", "tool_calls": [], "response": answer})
        if i % 5 == 2:
            lines.append({"id": f"stray{i}", "tool_calls": []})  # no reference: an error row
        if i % 7 == 3:
            lines.append("not json")
    predictions = write(tmp_path / "p.jsonl", lines)
    references = write(
        tmp_path / "r.jsonl",
        [
            {"id": f"r{i}", "expected_tool_calls": [], "expected_response": f"answer {i}" if i % 2 else "other"}
            for i in range(24)
        ],
    )
    answered: list[str] = []
    released = asyncio.Event()
    in_flight = peak = 0

    async def handle(request: httpx.Request) -> httpx.Response:
        # The first row's reply waits until five later rows were answered, so rows finish out of order.
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        data = shown(request)
        if data["agent_answer"] == "answer 0":
            await released.wait()
        answered.append(data["agent_answer"])
        if len(answered) >= 5:
            released.set()
        in_flight -= 1
        return reply(5 if data["agent_answer"] == data["reference_answer"] else 1, "scored")

    config = JudgeConfig(base_url=BASE, model="m", max_concurrency=4, max_attempts=1)
    with respx.mock(base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=handle)
        async with Judge(config) as judge:
            rows = [row async for row in ascore_files(predictions, references, judge=judge)]
    assert [r["id"] for r in rows] == [r["id"] for r in score_files(predictions, references)]
    assert len({r["id"] for r in rows}) == len(rows)
    assert answered[0] != "answer 0"  # the replies did come back out of order
    assert 1 < peak <= 4
    for row in rows:
        if row["id"].startswith("r"):
            assert row["response_correctness"] == (1.0 if int(row["id"][1:]) % 2 else 0.0)


async def test_at_most_twice_concurrency_rows_are_judged_at_once(tmp_path):
    predictions = write(tmp_path / "p.jsonl", [{"id": i, "tool_calls": [], "response": "a"} for i in range(12)])
    references = write(
        tmp_path / "r.jsonl", [{"id": i, "expected_tool_calls": [], "expected_response": "a"} for i in range(12)]
    )
    in_flight = peak = 0

    async def handle(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(20):  # let every other started row reach the judge too
            await asyncio.sleep(0)
        in_flight -= 1
        return reply(5, "same")

    with respx.mock(base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=handle)
        # The judge's limiter would allow 16 requests: the bound here is ascore_files' window.
        async with Judge(JudgeConfig(base_url=BASE, model="m", max_concurrency=16)) as judge:
            rows = [row async for row in ascore_files(predictions, references, judge=judge, concurrency=2)]
    assert len(rows) == 12
    assert peak <= 4


async def test_leaving_ascore_files_early_cancels_its_judge_requests(tmp_path):
    predictions = write(tmp_path / "p.jsonl", [{"id": i, "tool_calls": [], "response": "a"} for i in range(10)])
    references = write(
        tmp_path / "r.jsonl", [{"id": i, "expected_tool_calls": [], "expected_response": "a"} for i in range(10)]
    )
    with ScoringJudge():
        async with Judge(JudgeConfig(base_url=BASE, model="m", max_concurrency=2)) as judge:
            rows = ascore_files(predictions, references, judge=judge)
            first = await anext(rows)
            await rows.aclose()
    assert first["id"] == "0"
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


def test_a_second_run_with_the_cache_asks_the_judge_nothing(tmp_path):
    cache = tmp_path / "judge-cache.sqlite"
    args = (PREDICTIONS, "--references", REFERENCES, "--base-url", BASE, "--model", "m", "--cache-path", cache)
    with ScoringJudge() as judge:
        first = run(*args, "-o", tmp_path / "first.jsonl", "--json-summary")
        asked = len(judge.asked)
        second = run(*args, "-o", tmp_path / "second.jsonl", "--json-summary")
    assert asked == 8 and len(judge.asked) == asked
    assert json.loads(second.stdout)["judge"]["requests"] == 0
    first_rows, second_rows = (rows_of((tmp_path / name).read_text()) for name in ("first.jsonl", "second.jsonl"))
    assert [r["judge_usage"] for r in second_rows if r["judge_usage"]] == [
        {
            **r["judge_usage"],
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "prompt_chars": 0,
            "cost_usd": 0.0,
        }
        for r in first_rows
        if r["judge_usage"]
    ]  # cache hits cost nothing (an unpriced request: null)
    assert [{k: v for k, v in r.items() if k != "judge_usage"} for r in second_rows] == [
        {k: v for k, v in r.items() if k != "judge_usage"} for r in first_rows
    ]
    assert first.exit_code == second.exit_code == 0


def test_an_unusable_cache_file_is_warned_about_once_and_the_run_goes_on(tmp_path):
    cache = tmp_path / "not-sqlite.db"
    cache.write_bytes(b"this is not a SQLite database, just some bytes" * 100)
    with ScoringJudge() as judge:
        result = run(
            PREDICTIONS,
            "--references",
            REFERENCES,
            "-o",
            tmp_path / "rows.jsonl",
            "--base-url",
            BASE,
            "--model",
            "m",
            "--cache-path",
            cache,
        )
    assert result.exit_code == 0, result.output
    assert result.stderr.count(f"judge cache {cache}: DatabaseError: file is not a database") == 1
    assert "carrying on without the cache" in result.stderr
    assert judge.asked  # the rows were judged
