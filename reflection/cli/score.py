"""The body of `reflection score`; `reflection.cli` registers it as `app.command("score")(score)`.

Holds no scoring logic: it reads options, builds the judge from the same configuration as
`reflection check` (`--config`, `REFLECTION_JUDGE__*`, `--base-url/--model`), streams
`reflection.scoring.files.ascore_files` and prints. Rows go to `--output` (or stdout); the
summary goes to stdout when rows went to a file, else to stderr, so stdout stays pure JSON
Lines when piped. `--html` also writes the self-contained HTML report.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio
import typer

from reflection._json import dumps
from reflection._log import warnings_to_stderr
from reflection.cli.common import (
    open_text_output,
    raise_broken_pipe,
    refuse_input_as_output,
    user_errors,
)
from reflection.config import ReflectionConfig, load_config

if TYPE_CHECKING:  # loaded when `score` runs, so registering it keeps `reflection check` light
    from rich.table import Table

    from reflection.batch.html import ScoreHtmlReport
    from reflection.scoring.files import ScoreSummary

__all__ = ["score"]

_NO_JUDGE = "no judge configured (use --config, REFLECTION_JUDGE__*, or --base-url/--model)"


@user_errors
def score(
    predictions: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        readable=True,
        help="JSON Lines: {id, tool_calls | tool_call | messages, response?} per row.",
    ),
    references: Path = typer.Option(
        ...,
        "--references",
        exists=True,
        dir_okay=False,
        readable=True,
        help="JSON Lines: {id, expected_tool_calls, query?, tools?, expected_response?} per row.",
    ),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write per-sample rows here (default: stdout)."),
    json_summary: bool = typer.Option(
        False, "--json-summary", help="Print the summary as one JSON object instead of a table."
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        exists=True,
        dir_okay=False,
        help="YAML config with a judge (see config.example.yaml) for the judged metrics.",
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Judge endpoint (OpenAI-compatible); overrides the config."
    ),
    model: str | None = typer.Option(None, "--model", help="Judge model name; overrides the config."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, help="Judge requests at once (default: the judge's max_concurrency)."
    ),
    cache_path: Path | None = typer.Option(
        None, "--cache-path", dir_okay=False, help="Cache judge replies in this SQLite file (default: no cache)."
    ),
    html_out: Path | None = typer.Option(
        None, "--html", dir_okay=False, help="Also write a self-contained HTML report (charts, failing rows) here."
    ),
) -> None:
    """Score PREDICTIONS against --references (joined by id): per-sample JSON Lines and a summary.

    With a judge configured, rows also get the LLM-judged metrics (response_correctness,
    tool_selection_judged); without one those are null.
    """
    from rich.console import Console

    from reflection.batch.html import ScoreHtmlReport, write_html
    from reflection.scoring.files import ScoreSummary, metric_thresholds

    warnings_to_stderr()
    cfg = load_config(config, base_url=base_url, model=model)
    refuse_input_as_output(output, predictions, references)
    # No separate "judge skipped" line: the summary says it, and with rows on stdout a JSON
    # summary is all of stderr, which must stay one parseable object.
    # A wordnet path (config or REFLECTION_WORDNET) with no WordNet in it is a ValueError.
    summary = ScoreSummary(judge=cfg.judge is not None, wordnet=cfg.wordnet)
    if html_out is not None and not html_out.parent.is_dir():  # found out now, not after scoring every row
        raise ValueError(f"cannot write the HTML report: no folder {str(html_out.parent)!r}")
    # Unknown metric names in score_thresholds are a user error even without --html.
    thresholds = metric_thresholds(cfg.score_thresholds)
    page = ScoreHtmlReport(predictions, thresholds) if html_out is not None else None
    out = open_text_output(output) if output else sys.stdout
    try:
        # A judge endpoint that cannot answer (JudgeFatalError) stops at the first such error;
        # an unreadable WordNet database is a ValueError; both are user errors.
        anyio.run(_write_rows, predictions, references, out, summary, cfg, concurrency, cache_path, page)
    finally:
        if output:
            out.close()
        else:
            out.flush()
    stream = sys.stdout if output else sys.stderr
    data = summary.to_dict()
    if page is not None and html_out is not None:
        try:
            write_html(html_out, page.render(data))
        except OSError as exc:
            typer.echo(f"error: cannot write the HTML report: {exc}", err=True)
            raise typer.Exit(2) from None
    if json_summary:
        stream.write(dumps(data) + "\n")
    else:
        raise_broken_pipe(Console(file=stream, soft_wrap=True)).print(_table(data))


async def _write_rows(
    predictions: Path,
    references: Path,
    out: IO[str],
    summary: ScoreSummary,
    cfg: ReflectionConfig,
    concurrency: int | None,
    cache_path: Path | None,
    page: ScoreHtmlReport | None,
) -> None:
    from reflection.judge import build_judge
    from reflection.judge.cache import SQLiteJudgeCache
    from reflection.scoring.files import ascore_files

    async with contextlib.AsyncExitStack() as stack:
        judge = None
        if cfg.judge is not None:
            cache = await stack.enter_async_context(SQLiteJudgeCache(cache_path)) if cache_path else None
            # The command's concurrency is the judge's: its limiter and connection pool are sized to it.
            judge = await stack.enter_async_context(
                build_judge(cfg.judge, max_concurrency=concurrency or cfg.judge.max_concurrency, cache=cache)
            )
        async for row in ascore_files(
            predictions,
            references,
            judge=judge,
            concurrency=concurrency,
            prompts_dir=cfg.prompts_dir,
            wordnet=cfg.wordnet,
        ):
            summary.add(row)
            if page is not None:
                page.add(row)
            out.write(dumps(row) + "\n")


def _table(data: dict[str, Any]) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="reflection score", title_justify="left")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("n", justify="right")
    for name, stats in data["metrics"].items():
        mean = "-" if stats["mean"] is None else f"{stats['mean']:.3f}"
        table.add_row(name, mean, f"{stats['n']:,}")
    table.add_section()
    overall = data["overall_score"]
    weights = data["weights"]
    label = "overall ({:.2f}/{:.2f}/{:.2f}/{:.2f})".format(
        weights["tool_selection_accuracy"],
        weights["parameter_accuracy"],
        weights["execution_success"],
        weights["response_quality"],
    )
    table.add_row(label, "-" if overall is None else f"{overall:.3f} {data['interpretation']}", "")
    table.add_row("rows", f"{data['rows']:,}", "")
    table.add_row("error rows", f"{data['error_rows']:,}", "")
    table.add_row("no call when one was expected", f"{data['no_call']:,}", "")
    table.add_row("call to a tool not in the inventory", f"{data['unknown_tool']:,}", "")
    if data["meteor_synonyms"] is not None:
        table.add_row("METEOR synonyms (WordNet)", "on" if data["meteor_synonyms"] else "off", "")
    notes = []
    judge = data["judge"]
    if judge["configured"]:
        table.add_row("rows with a judge error", f"{judge['error_rows']:,}", "")
        table.add_row("judge requests", f"{judge['requests']:,}", "")
        table.add_row(
            "judge tokens (prompt / completion)", f"{judge['prompt_tokens']:,} / {judge['completion_tokens']:,}", ""
        )
        table.add_row("judge cost (USD)", "unknown" if judge["cost_usd"] is None else f"{judge['cost_usd']:.4f}", "")
        if judge["cost_usd"] is None:
            notes.append("judge cost unknown: no price for the judge model (set judge.prices in the config)")
    else:
        notes.append(f"judged metrics skipped: {_NO_JUDGE}")
    if data["metrics"]["response_exact_match"]["n"] and not data["metrics"]["response_rouge_l"]["n"]:
        notes.append(
            "response_rouge_l and response_meteor need the metrics extra: pip install 'toolcall-reflection[metrics]'"
        )
    if data["meteor_synonyms"] is False:
        notes.append(
            "response_meteor: WordNet synonyms off, exact and stem matches only (install Debian's "
            "wordnet-base, or set REFLECTION_WORDNET to a WordNet database directory)"
        )
    if notes:  # plain text, not markup: "[metrics]" in an install hint would be read as a style
        table.caption = Text("\n".join(notes), style="table.caption")
    return table
