"""`reflect()` and `Reflector`: static checks, grounding, the judge and the verdict, wired."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import sniffio

from reflection import telemetry
from reflection._slices import Slices
from reflection.config import ReflectionConfig
from reflection.formats import is_parallel, normalize_calls, normalize_history, normalize_tools
from reflection.grounding import ground
from reflection.model import (
    History,
    JudgeUsage,
    ReflectionResult,
    SemanticCheckResult,
    StaticResult,
    ToolCall,
    ToolInventory,
    ValueGrounding,
)
from reflection.results import ZERO_USAGE, CoreData, GroundingData, ResultData, SemanticData
from reflection.static import check_call, check_call_data, check_calls, prepare
from reflection.verdict import judge_check, overall_valid

if TYPE_CHECKING:  # the judge (httpx, tenacity, openai) loads only when a reflector has one
    import httpx

    from reflection.judge import Judge

__all__ = ["STATIC_ONLY", "Reflector", "check_static", "core_data", "reflect", "reflect_plain", "reflect_sync"]

NO_JUDGE = "no judge configured: static checks and grounding only"
STATIC_FAILED = "the static stage failed (set continue_on_static to run the judge anyway)"


_SIBLINGS = 16
"""Other calls of the same turn shown to the judge with each call: enough to see a plan, and
bounded so a turn of thousands of calls costs linear work, not quadratic."""


def siblings(calls: Sequence[ToolCall], index: int) -> tuple[ToolCall, ...]:
    """The other calls of `calls`' turn that the judge sees beside `calls[index]` (the nearest
    ones, at most `_SIBLINGS`)."""
    if len(calls) <= 1:
        return ()
    lo = max(0, min(index - _SIBLINGS // 2, len(calls) - 1 - _SIBLINGS))
    return tuple(calls[j] for j in range(lo, min(len(calls), lo + _SIBLINGS + 1)) if j != index)[:_SIBLINGS]


class Reflector:
    """Reflects calls with one judge client and one concurrency limiter, reused across calls.

    Build it from a config (`Reflector(config)`) or around an existing `Judge`
    (`Reflector(judge=judge)`); with neither judge nor `config.judge`, only the static stage
    and grounding run. Use `async with Reflector(...) as r:` or call `aclose()`.
    """

    def __init__(
        self,
        config: ReflectionConfig | None = None,
        *,
        judge: Judge | None = None,
        http_client: httpx.AsyncClient | None = None,
    ):
        self.config = config or ReflectionConfig()
        self._owns_judge = judge is None and self.config.judge is not None
        if judge is None and self.config.judge is not None:
            from reflection.judge import build_judge

            judge = build_judge(self.config.judge, http_client=http_client)
        self.judge = judge

    async def __aenter__(self) -> Reflector:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the judge's HTTP client if this reflector created it."""
        if self._owns_judge and self.judge is not None:
            await self.judge.aclose()

    async def reflect(self, call: Any, tools: Any, history: Any = None) -> ReflectionResult | list[ReflectionResult]:
        """Reflect a proposed call. One call gives one `ReflectionResult`; several calls (a
        list, or an assistant message with `tool_calls`) give one result per call, in order."""
        slices = Slices()  # a large turn's normalisation counts toward its first slice
        calls = normalize_calls(call)
        inventory = normalize_tools(tools)
        conversation = normalize_history(history)
        if not is_parallel(call):
            return await self._reflect_one(calls[0], inventory, conversation, ())
        if self.judge is None or not self.config.checks or len(calls) == 1:  # one pass, no tasks
            results_in_order = []  # a large turn shares the event loop
            for i, one in enumerate(calls):
                results_in_order.append(await self._reflect_one(one, inventory, conversation, siblings(calls, i)))
                await slices.tick()
            return results_in_order
        results: list[ReflectionResult | None] = [None] * len(calls)

        async def run(i: int) -> None:
            results[i] = await self._reflect_one(calls[i], inventory, conversation, siblings(calls, i))

        try:
            async with anyio.create_task_group() as tg:
                for i in range(len(calls)):
                    tg.start_soon(run, i)
        except BaseExceptionGroup as failed:
            from reflection.judge import reraise_fatal

            reraise_fatal(failed)
            raise
        return [r for r in results if r is not None]

    async def reflect_many(
        self, items: Iterable[Mapping[str, Any] | Sequence[Any]], *, concurrency: int = 16
    ) -> list[ReflectionResult | list[ReflectionResult]]:
        """Reflect many `(call, tools, history)` tuples or `{"call", "tools", "history"}`
        mappings concurrently; results come back in input order."""
        rows = list(items)
        results: list[Any] = [None] * len(rows)
        limiter = anyio.CapacityLimiter(concurrency)

        async def run(i: int, row: Mapping[str, Any] | Sequence[Any]) -> None:
            async with limiter:
                if isinstance(row, Mapping):
                    results[i] = await self.reflect(
                        row.get("call", row.get("tool_calls")), row.get("tools"), row.get("history")
                    )
                else:
                    results[i] = await self.reflect(*row)

        try:
            async with anyio.create_task_group() as tg:
                for i, row in enumerate(rows):
                    tg.start_soon(run, i, row)
        except BaseExceptionGroup as failed:
            from reflection.judge import reraise_fatal

            reraise_fatal(failed)
            raise
        return results

    async def _reflect_one(
        self, call: ToolCall, inventory: ToolInventory, history: History, siblings: tuple[ToolCall, ...]
    ) -> ReflectionResult:
        with telemetry.reflection_span(call.name, self.judge.config.model if self.judge else None) as span:
            base = self._static_stage(call, inventory, history)
            if self.judge is None or not self.config.checks:
                result = ReflectionResult(
                    **base, judge_skipped=NO_JUDGE, overall_valid=overall_valid(base["static"], {})
                )
            elif not base["static"].valid and not self.config.continue_on_static:
                result = ReflectionResult(**base, judge_skipped=STATIC_FAILED, overall_valid=False)
            else:
                result = await self._semantic_stage(base, inventory, history, siblings)
            telemetry.record_result(span, result)
            return result

    def _static_stage(self, call: ToolCall, inventory: ToolInventory, history: History) -> dict[str, Any]:
        """The judge-free part of a reflection (`core_data`): static checks, grounding and
        warnings, as `ReflectionResult` fields (the gate decides on them whether to ask the judge)."""
        core = core_data(call, inventory, history)
        return {
            "call": call,
            "static": StaticResult.from_data(core["static"]),
            "grounding": tuple(ValueGrounding.from_data(item) for item in core["grounding"]),
            "warnings": core["warnings"],
        }

    async def _semantic_stage(
        self, base: dict[str, Any], inventory: ToolInventory, history: History, siblings: tuple[ToolCall, ...]
    ) -> ReflectionResult:
        """Ask the judge about the call in `base` (from `_static_stage`) and reduce to the verdict."""
        from reflection.semantic import SemanticRequest, run_semantic

        assert self.judge is not None
        call: ToolCall = base["call"]
        checks = assessable(self.config.checks, history)
        if not checks:  # every configured check needs a conversation and there is none
            return self._verdict(base, {}, JudgeUsage(), history)
        request = SemanticRequest(
            call=call,
            spec=inventory.get(call.name),
            inventory=inventory,
            history=history,
            grounding=base["grounding"],
            parallel_calls=siblings,
        )
        replies, usage = await run_semantic(
            self.judge,
            request,
            checks,
            mode=self.config.mode,
            token_budget=self.config.history_token_budget,
            prompts_dir=self.config.prompts_dir,
        )
        return self._verdict(base, replies, usage, history)

    def _verdict(self, base: dict[str, Any], replies: dict[str, Any], usage: Any, history: History) -> ReflectionResult:
        """The result from the judge's replies (or `JudgeError`s), with thresholds applied; the
        configured checks that need a conversation `history` lacks are `skipped`, not assessed."""
        semantic = {}
        for name in self.config.checks:
            if name in replies:
                semantic[name] = judge_check(replies[name], self.config.thresholds[name], self.config.uncertain_below)
            elif not has_conversation(history):
                semantic[name] = NOT_ASSESSABLE
        return ReflectionResult(
            **base, semantic=semantic, usage=usage, overall_valid=overall_valid(base["static"], semantic)
        )


NEEDS_CONVERSATION = frozenset(
    {"general_hallucination_check", "function_selection_appropriateness", "agentic_constraints_satisfaction"}
)
"""Judge checks that ask what the user wanted or what the conversation supports: with no
user turn they cannot be assessed (the value-format check needs only the call and its spec)."""

NOT_ASSESSABLE = SemanticCheckResult(
    status="skipped", explanation="not assessable: no conversation was given, and this check needs the user's request"
)
"""A judge check that needs a conversation, where none was given: not failed, not asked."""


def has_conversation(history: History) -> bool:
    """Whether `history` has a user turn with text: what the conversation checks rest on."""
    return any(m.role == "user" and m.content for m in history.messages)


def assessable(checks: tuple[str, ...], history: History) -> tuple[str, ...]:
    """The configured `checks` the judge can assess with `history`."""
    if has_conversation(history):
        return checks
    return tuple(name for name in checks if name not in NEEDS_CONVERSATION)


def core_data(call: ToolCall, inventory: ToolInventory, history: History, grounding: bool = True) -> CoreData:
    """The judge-free core of one normalised call's reflection as plain data
    (`results.CoreData`): its static checks (`static.check_call_data`), grounding
    (`grounding.ground`; left empty without `grounding`) and warnings. `Reflector` builds its
    models from it, `reflect_plain` the CLI's rows."""
    prepared = prepare(inventory)
    static = check_call_data(call, prepared)
    grounded: list[GroundingData] = []
    if grounding and call.error is None:
        tool = prepared.tools.get(call.name)
        grounded = ground(call, history, tool[0] if tool is not None else None)
    return {"call": call, "static": static, "grounding": grounded, "warnings": (*static["warnings"], *history.problems)}


_NO_SEMANTIC: dict[str, SemanticData] = {}
_NO_HISTORY = History()


def reflect_plain(
    call: Any, tools: Any, history: Any = None, *, grounding: bool = True
) -> ResultData | list[ResultData]:
    """What `Reflector().reflect(call, tools, history)` returns with no judge, as plain data
    (`results.ResultData`, the checker's own: calls stay `ToolCall` objects and constant
    parts are shared; data to write with `results.output_row` and `rows.line_of`, never to
    mutate). One result for one call, a list for several. Without `grounding`, the grounding
    is left empty and the history is not read (flat rows need neither). Raises as
    `Reflector.reflect` does for data the normalisers refuse."""
    calls = normalize_calls(call)
    inventory = normalize_tools(tools)
    conversation = normalize_history(history) if grounding else _NO_HISTORY
    parallel = is_parallel(call)
    results: list[ResultData] = []
    for one in calls if parallel else calls[:1]:
        core = core_data(one, inventory, conversation, grounding)
        results.append(
            {
                "call": one,
                "static": core["static"],
                "grounding": core["grounding"],
                "semantic": _NO_SEMANTIC,
                "judge_skipped": NO_JUDGE,
                "overall_valid": core["static"]["valid"],
                "usage": ZERO_USAGE,
                "warnings": core["warnings"],
            }
        )
    return results if parallel else results[0]


STATIC_ONLY = "static stage only"
"""Why the judge was not asked in `check_static`, when the caller gives no other reason."""


def check_static(
    call: Any, tools: Any, *, judge_skipped: str = STATIC_ONLY
) -> ReflectionResult | list[ReflectionResult]:
    """The static stage's verdict on a proposed call as a `ReflectionResult` (one call: one
    result; several, as `Reflector.reflect` reads them: one per call, in order), with no grounding
    and no judge (`POST /v1/check`): `judge_skipped` says so, `overall_valid` is the static
    verdict. Raises `TypeError` / `ValueError` for data the normalisers refuse, as
    `Reflector.reflect` does."""
    parallel = is_parallel(call)
    statics = check_calls(call, tools) if parallel else [check_call(call, tools)]
    results = [
        ReflectionResult(call=s.call, static=s, warnings=s.warnings, judge_skipped=judge_skipped, overall_valid=s.valid)
        for s in statics
    ]
    return results if parallel else results[0]


async def reflect(
    call: Any, tools: Any, history: Any = None, *, config: ReflectionConfig | None = None
) -> ReflectionResult | list[ReflectionResult]:
    """Reflect one proposed call (or several parallel calls) against the tool specs and the
    conversation that led to it. With no judge in `config`, runs the static stage and grounding.

    For many calls, build one `Reflector` and reuse it: it keeps the connection pool warm.
    """
    async with Reflector(config) as reflector:
        return await reflector.reflect(call, tools, history)


def reflect_sync(
    call: Any, tools: Any, history: Any = None, *, config: ReflectionConfig | None = None
) -> ReflectionResult | list[ReflectionResult]:
    """Blocking `reflect()`. Safe inside a running event loop (Jupyter): then it runs the
    reflection on a worker thread with its own loop."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return anyio.run(lambda: reflect(call, tools, history, config=config))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, lambda: reflect(call, tools, history, config=config)).result()
