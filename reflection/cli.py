"""The `reflection` command. Holds no logic: it parses options and calls the library."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import typer

from reflection._json import dumps
from reflection.batch.runner import reflect_dataset, static_lines
from reflection.batch._cli import WORKERS_HELP, batch, report
from reflection.batch._workers import default_workers, use_processes
from reflection.config import ReflectionConfig
from reflection._log import warnings_to_stderr
from reflection.scoring._cli import score

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Check LLM agents' tool calls before they execute, and score them against references.")


@app.callback()
def _root() -> None:
    """Check LLM agents' tool calls before they execute, and score them against references."""


def load_config(config: Path | None, *, static_only: bool = False, **flags: Any) -> ReflectionConfig:
    """Config from a YAML file, the environment (REFLECTION_*), then flags; `static_only` drops the judge."""
    judge_flags = {k: v for k, v in flags.items() if k in ("base_url", "model") and v is not None}
    other = {k: v for k, v in flags.items() if k not in ("base_url", "model") and v is not None}
    overrides: dict[str, Any] = dict(other)
    if judge_flags:
        overrides["judge"] = judge_flags
    cfg = ReflectionConfig.from_file(config, **overrides) if config else ReflectionConfig(**_merge_env(overrides))
    return cfg.model_copy(update={"judge": None}) if static_only else cfg


def _merge_env(overrides: dict[str, Any]) -> dict[str, Any]:
    """Flags over the environment, keeping env-set judge fields a flag does not name."""
    env = ReflectionConfig().model_dump(exclude_unset=True)
    if "judge" in overrides and isinstance(env.get("judge"), dict):
        overrides = {**overrides, "judge": {**env["judge"], **overrides["judge"]}}
    return {**env, **overrides}


@app.command()
def check(
    input: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSON Lines rows {id, tools, history, call | tool_calls}."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write result rows here (default: stdout)."),
    static_only: bool = typer.Option(False, "--static-only", help="Run only the static checks and grounding."),
    config: Path | None = typer.Option(None, "--config", exists=True, dir_okay=False, help="YAML config (see config.example.yaml)."),
    base_url: str | None = typer.Option(None, "--base-url", help="Judge endpoint (OpenAI-compatible)."),
    model: str | None = typer.Option(None, "--model", help="Judge model name."),
    mode: str | None = typer.Option(None, "--mode", help="combined (one request per call) or per_check."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Rows reflected at once."),
    flat: bool = typer.Option(False, "--flat", help="Write only id, overall_valid, the flat keys and error per row."),
    workers: int | None = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
) -> None:
    """Reflect every row of INPUT and write one JSON result row per input row."""
    warnings_to_stderr()
    cfg = load_config(config, static_only=static_only, base_url=base_url, model=model, mode=mode)
    if cfg.judge is None:
        reason = "--static-only" if static_only else "no judge configured (use --config, REFLECTION_JUDGE__*, or --base-url/--model)"
        typer.echo(f"judge skipped: {reason}; running static checks and grounding only", err=True)
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    try:
        processes = workers or default_workers()
        if use_processes(input, cfg, processes):
            counts = anyio.run(_write_lines, static_lines(input, cfg, workers=processes, flat=flat, format="jsonl"), out)
        else:
            counts = anyio.run(_check_file, input, out, cfg, concurrency, flat)
    except _judge_fatal_error() as exc:  # the endpoint cannot answer any row: stop at the first such error
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        if output:
            out.close()
    typer.echo(f"{counts['rows']} rows: {counts['valid']} valid, {counts['invalid']} invalid, "
               f"{counts['unknown']} unknown, {counts['error']} error", err=True)


def _judge_fatal_error() -> type[Exception]:
    # Evaluated only when an exception reaches the `except`: a static-only run never loads the judge.
    from reflection.judge import JudgeFatalError

    return JudgeFatalError


async def _write_lines(lines: Any, out: Any) -> dict[str, int]:
    counts = {"rows": 0, "valid": 0, "invalid": 0, "unknown": 0, "error": 0}
    async for summary, line in lines:
        _tally(counts, summary)
        out.write(line.decode())
    return counts


def _tally(counts: dict[str, int], row: dict[str, Any]) -> None:
    counts["rows"] += 1
    counts["error" if "error" in row else {True: "valid", False: "invalid", None: "unknown"}[row["overall_valid"]]] += 1


async def _check_file(path: Path, out: Any, cfg: ReflectionConfig, concurrency: int, flat: bool) -> dict[str, int]:
    counts = {"rows": 0, "valid": 0, "invalid": 0, "unknown": 0, "error": 0}
    async for row in reflect_dataset(path, config=cfg, concurrency=concurrency, format="jsonl", flat=flat):
        _tally(counts, row)
        out.write(dumps(row) + "\n")
    return counts


app.command("score", help="Score predicted tool calls against references (JSON Lines joined by id).")(score)
app.command("batch", help="Reflect a dataset with resume, judge cache, progress and a report.")(batch)
app.command("report", help="Summarise a batch output file (text table or --json).")(report)
