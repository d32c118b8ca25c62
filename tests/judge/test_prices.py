"""Judge costs: the config's `prices` first, then the genai-prices table by endpoint and model,
else unknown (`cost_usd` null, "unknown" in the text reports), never $0."""

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from reflection import JudgeConfig, Price, ReflectionConfig, reflect
from reflection.batch.progress import PlainProgress
from reflection.batch.report import build_report, format_cost, render_report
from reflection.judge import Judge
from reflection.judge.prices import TablePrice, configured_cost
from reflection.model import JudgeUsage
from reflection.testing import FakeJudge

CALL = {"name": "get_order", "arguments": {"order_id": "A-17"}}
TOOLS = [{"name": "get_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}]
USAGE = JudgeUsage(requests=1, prompt_tokens=1_000_000, completion_tokens=100_000, cached_tokens=200_000)


def judge(**config):
    return Judge(JudgeConfig(api_key="k", **config))


def test_the_table_prices_a_hosted_model_by_its_endpoint():
    cost = judge(base_url="https://api.openai.com/v1", model="gpt-4o-mini").cost(USAGE)
    # gpt-4o-mini at OpenAI: $0.15 / M prompt, $0.075 / M cached, $0.60 / M completion.
    assert cost == pytest.approx(0.8 * 0.15 + 0.2 * 0.075 + 0.1 * 0.60)


def test_the_config_price_overrides_the_table():
    prices = {"gpt-4o-mini": Price(prompt=1.0, completion=2.0, cached=0.5)}
    cost = judge(base_url="https://api.openai.com/v1", model="gpt-4o-mini", prices=prices).cost(USAGE)
    assert cost == pytest.approx(0.8 * 1.0 + 0.2 * 0.5 + 0.1 * 2.0)


@pytest.mark.parametrize(
    ("base_url", "model"),
    [
        ("http://localhost:8000/v1", "qwen2.5-7b-instruct"),  # a local server: not a price the table can know
        ("http://localhost:4000/v1", "gpt-4o-mini"),  # a proxy: the table does not guess from the name
        ("https://api.openai.com/v1", "no-such-model-xyz"),
    ],
)
def test_a_model_nobody_prices_has_an_unknown_cost_not_zero(base_url, model):
    assert judge(base_url=base_url, model=model).cost(USAGE) is None


def test_a_missing_price_is_looked_up_once():
    table = TablePrice("http://localhost:8000/v1", "local")
    assert table.cost(10, 0, 10) is None and table.missing
    assert table.cost(10, 0, 10) is None


def test_configured_cost_clamps_odd_token_counts():
    assert configured_cost(Price(prompt=1.0, completion=1.0), prompt=-5, cached=10, completion=-1) == 0.0


def test_a_sum_with_an_unknown_part_is_unknown():
    assert (
        JudgeUsage.total([JudgeUsage(requests=1, cost_usd=0.5), JudgeUsage(requests=1, cost_usd=None)]).cost_usd is None
    )
    assert JudgeUsage.total([JudgeUsage(requests=1, cost_usd=0.5), JudgeUsage()]).cost_usd == 0.5


async def test_a_reflection_at_an_unpriced_judge_has_a_null_cost_and_without_requests_zero():
    with FakeJudge() as fake:  # a test endpoint no table knows
        result = await reflect(CALL, TOOLS, "order A-17", config=ReflectionConfig(judge=fake.config))
        priced = fake.config.model_copy(update={"prices": {fake.model: Price(prompt=1.0, completion=1.0)}})
        paid = await reflect(CALL, TOOLS, "order A-17", config=ReflectionConfig(judge=priced))
    assert result.usage.requests == 1 and result.usage.cost_usd is None
    assert result.model_dump(mode="json")["usage"]["cost_usd"] is None
    assert paid.usage.cost_usd == pytest.approx((paid.usage.prompt_tokens + paid.usage.completion_tokens) / 1e6)
    static = await reflect(CALL, TOOLS, "order A-17")
    assert static.usage.cost_usd == 0.0


def row(rid, requests, cost):
    return {
        "id": rid,
        "overall_valid": True,
        "usage": {
            "requests": requests,
            "prompt_tokens": 10,
            "completion_tokens": 1,
            "cached_tokens": 0,
            "cost_usd": cost,
        },
    }


def test_the_batch_report_says_unknown_when_a_row_cost_is_unknown():
    report = build_report([row("a", 1, 0.25), row("b", 1, None), row("c", 0, 0.0)])
    assert report.judge.cost_usd is None
    assert json.loads(report.model_dump_json())["judge"]["cost_usd"] is None
    console = Console(record=True, width=200)
    render_report(report, console)
    assert "cost unknown (no price for the judge model: set judge.prices in the config)" in console.export_text()
    assert "$0.0000" not in console.export_text()


def test_the_batch_report_sums_known_costs():
    report = build_report([row("a", 1, 0.25), row("b", 1, 0.5), row("c", 0, 0.0)])
    assert report.judge.cost_usd == 0.75
    assert format_cost(report.judge.cost_usd) == "$0.7500"


def test_progress_shows_an_unknown_cost():
    console = Console(record=True, width=200)
    progress = PlainProgress(console)
    progress.start(2, 0)
    progress.row(row("a", 1, None))
    progress.finish()
    assert "cost unknown" in console.export_text()


def test_the_score_summary_says_unknown_for_an_unpriced_judge(tmp_path):
    from reflection._resources import example_path
    from reflection.cli import app

    with FakeJudge() as fake:
        result = CliRunner().invoke(
            app,
            [
                "score",
                str(example_path("scoring/predictions.jsonl")),
                "--references",
                str(example_path("scoring/references.jsonl")),
                "-o",
                str(tmp_path / "s.jsonl"),
                "--base-url",
                fake.base_url,
                "--model",
                fake.model,
                "--json-summary",
            ],
        )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["judge"]["cost_usd"] is None


@pytest.mark.slow
def test_the_price_table_loads_with_a_judge_never_with_import_reflection():
    import subprocess
    import sys

    probe = (
        "import sys, reflection\nfrom reflection.static import check_call\nbefore = 'genai_prices' in sys.modules\n"
        "from reflection import Judge, JudgeConfig\nJudge(JudgeConfig(api_key='k'))\n"
        "print(before, 'genai_prices' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
