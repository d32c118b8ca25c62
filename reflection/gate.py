"""The runtime gate: a policy on top of the pipeline that turns a verdict into an action.

    async with Gate(config) as gate:
        decision = await gate.check(call, tools, history)
    if decision.action in ("allow", "modify"):
        run(decision.call)                 # the verified correction when "modify"
    elif decision.action == "reflect":
        send_to_model(decision.feedback)   # don't run; let the model try again

Per-tool rules (skip / static only / full pipeline, and a risk tier), the judge cascade,
a deadline per decision, fail-open or fail-closed on judge failure, an in-memory cache of
judge replies and shadow mode are set by `GatePolicy` (`config.gate`, YAML `gate:`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any, Final

import anyio
import httpx
from pydantic import BaseModel, ConfigDict

from reflection import telemetry
from reflection._own_words import remember
from reflection._slices import Slices
from reflection._text import shorten
from reflection.config import GateAction, GatePolicy, ReflectionConfig, RiskTier, ToolRule
from reflection.formats import express_call, is_parallel, normalize_calls, normalize_history, normalize_tools, raw_calls
from reflection.judge import Judge, JudgeError, JudgeFatalError, MemoryJudgeCache, build_judge
from reflection.model import (
    History,
    JudgeUsage,
    ReflectionResult,
    ToolCall,
    ToolInventory,
    ValueGrounding,
    trusted,
)
from reflection.pipeline import NO_JUDGE, STATIC_FAILED, Reflector, assessable, siblings
from reflection.verdict import overall_valid

__all__ = ["Decision", "Gate", "GatePolicy", "MemoryJudgeCache", "ToolRule"]

logger = logging.getLogger("reflection.gate")

_BLOCKING: Final = ("reflect", "deny", "escalate")  # a tuple of literals: `in` narrows the action
# Where a value may come from for the cascade to trust it without the judge: the people and
# tools in the conversation, or the spec's default. An enum member alone is only "allowed".
_TRUSTED_SOURCES = frozenset({"user", "tool", "system", "default"})
_AUTH_ERRORS = ("HTTP 401", "HTTP 403")
_REASON_DETAIL = 160
DEADLINE_PASSED = "no judge reply within the deadline"


class Decision(BaseModel):
    """What to do with one proposed call. `model_dump(mode="json")` is its JSON form."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    action: GateAction
    """`allow`: run `call`; `modify`: run `call`, the verified static correction; `reflect`:
    don't run, send `feedback` to the model; `deny`: don't run; `escalate`: ask a human."""
    call: Any
    """The call to run, in the caller's format; for `modify` the correction, else the original."""
    feedback: str | None = None
    """Text for the agent's model when the action is reflect, deny or escalate."""
    reason: str
    """One short line saying why this action."""
    result: ReflectionResult | None = None
    """The reflection; None only when a `skip` rule matched the tool."""
    latency_ms: float
    cost_usd: float | None = 0.0
    """USD of the judge requests behind this decision; None when their price is unknown."""
    shadow_action: GateAction | None = None
    """In shadow mode, the action the gate would have taken (`action` is then `allow`)."""
    tool: str
    """The called tool's name."""


class Gate:
    """Decides, call by call, whether an agent's proposed tool call may run.

    `Gate(config)` applies `config.gate`; `policy=` overrides it. The judge is `judge=`, or
    one built from `config.judge` with an in-memory reply cache (`policy.cache_size`); with
    neither, decisions rest on the static checks. Use `async with Gate(...) as gate:` or call
    `aclose()` (`close()` after `check_sync`).
    """

    def __init__(
        self,
        config: ReflectionConfig | None = None,
        *,
        policy: GatePolicy | None = None,
        judge: Judge | None = None,
        http_client: httpx.AsyncClient | None = None,
    ):
        self.config = config or ReflectionConfig()
        self.policy = policy if policy is not None else self.config.gate
        self._owns_judge = judge is None and self.config.judge is not None
        self._http_client = http_client
        if self._owns_judge:
            assert self.config.judge is not None
            judge = build_judge(self.config.judge, http_client=http_client, memory_cache=self.policy.cache_size)
        self.judge = judge
        self._reflector = Reflector(self.config, judge=judge)
        self._logged: set[str] = set()  # problems already logged (shared with the check_sync gate)
        self._sync: _SyncRunner | None = None

    async def __aenter__(self) -> Gate:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """Close the judge's HTTP client if this gate created it (and the `check_sync` loop)."""
        if self._owns_judge and self.judge is not None:
            await self.judge.aclose()
        if self._sync is not None:
            sync, self._sync = self._sync, None
            await asyncio.get_running_loop().run_in_executor(None, sync.close)

    def close(self) -> None:
        """Blocking `aclose()`, for code that only uses `check_sync`."""
        if self._sync is not None:
            sync, self._sync = self._sync, None
            sync.close()
        if self._owns_judge and self.judge is not None:
            _SyncRunner.run_once(self.judge.aclose())

    async def check(
        self, call: Any, tools: Any, history: Any = None, *, started: float | None = None
    ) -> Decision | list[Decision]:
        """Decide on a proposed call. One call gives one `Decision`; several (a list, or an
        assistant message with `tool_calls` or `tool_use` blocks) give one per call, in order,
        each reflected with the others as context. Accepts every shape `reflect()` accepts.

        `started` (a `time.perf_counter()` reading) is when the request arrived: the policy's
        deadline counts from it, so time spent queueing counts too. Default: now."""
        if started is None:
            started = time.perf_counter()
        slices = Slices()  # a large turn's normalisation counts toward its first slice
        calls = normalize_calls(call)
        inventory = normalize_tools(tools)
        conversation = normalize_history(history)
        if not is_parallel(call):
            return await self._decide(call, tuple(calls), 0, inventory, conversation, started)
        raws = raw_calls(call)
        if len(raws) != len(calls):  # cannot happen for shapes normalize_calls reads; keep the internal form
            raws = list(calls)
        group = tuple(calls)
        if self.judge is None or len(calls) == 1:
            # Nothing to wait for side by side: one pass, linear in the number of calls, that lets
            # the event loop serve other requests between slices of a large turn.
            decided = []
            for i in range(len(calls)):
                if i:
                    await slices.tick()
                decided.append(await self._decide(raws[i], group, i, inventory, conversation, started))
            return decided
        decisions: list[Decision | None] = [None] * len(calls)

        async def run(i: int) -> None:
            decisions[i] = await self._decide(raws[i], group, i, inventory, conversation, started)

        async with anyio.create_task_group() as tg:
            for i in range(len(calls)):
                tg.start_soon(run, i)
        return [d for d in decisions if d is not None]

    def check_sync(self, call: Any, tools: Any, history: Any = None) -> Decision | list[Decision]:
        """Blocking `check()`. Safe inside a running event loop: the decision is made on the
        gate's own event-loop thread (with its own judge connections)."""
        if self._sync is None:
            self._sync = _SyncRunner(self)
        return self._sync.check(call, tools, history)

    # --- one decision ------------------------------------------------------------------

    async def _decide(
        self,
        raw: Any,
        calls: tuple[ToolCall, ...],
        index: int,
        inventory: ToolInventory,
        history: History,
        started: float,
    ) -> Decision:
        call = calls[index]
        with telemetry.gate_span(call.name) as span:
            decision = await self._decide_traced(raw, calls, index, inventory, history, started)
            telemetry.record_decision(span, decision)
            return decision

    async def _decide_traced(
        self,
        raw: Any,
        calls: tuple[ToolCall, ...],
        index: int,
        inventory: ToolInventory,
        history: History,
        started: float,
    ) -> Decision:
        policy = self.policy
        call = calls[index]
        rule = policy.rule_for(call.name)
        if rule is not None and rule.checks == "skip":
            return self._finish("allow", raw, call, f"tool matched skip rule {rule.match!r}", None, started)
        model = self.judge.config.model if self.judge is not None else None
        with telemetry.reflection_span(call.name, model) as span:
            base = self._reflector._static_stage(call, inventory, history)
            static = base["static"]
            correctable = (
                not static.valid
                and static.correction is not None
                and policy.apply_corrections
                and _applicable(call, static.correction, policy)
            )
            # Rules and risk follow the call that would run: a rename the policy applies runs another tool.
            runs = static.correction.name if correctable and static.correction is not None else call.name
            if runs != call.name:
                rule = policy.rule_for(runs)
            risk: RiskTier = rule.risk if rule is not None and rule.risk is not None else policy.default_risk
            skipped = self._judge_skipped(rule, risk, base, correctable)
            if skipped is None:
                result = await self._ask_judge(base, inventory, history, siblings(calls, index), started)
            else:
                result = trusted(
                    ReflectionResult, **base, judge_skipped=skipped, overall_valid=overall_valid(static, {})
                )
            telemetry.record_result(span, result)
        action, reason = self._action(result, risk, correctable)
        return self._finish(action, raw, call, reason, result, started)

    async def _ask_judge(
        self,
        base: dict[str, Any],
        inventory: ToolInventory,
        history: History,
        siblings: tuple[ToolCall, ...],
        started: float,
    ) -> ReflectionResult:
        """The judge's verdict; past the policy's deadline, or when the endpoint cannot answer at
        all (`JudgeFatalError`: a rejected key, an unknown model, a refused connection), every
        check in `error` saying why, so the judge-failure policy decides instead of an exception."""
        remaining = math.inf
        if self.policy.deadline_ms is not None:
            remaining = max(0.0, self.policy.deadline_ms / 1000 - (time.perf_counter() - started))
        try:
            with anyio.move_on_after(remaining):
                return await self._reflector._semantic_stage(base, inventory, history, siblings)
        except JudgeFatalError as fatal:  # run_semantic unwraps it from its task group
            key = f"fatal {fatal.status}"
            if key not in self._logged:  # once per gate: every later call would say the same
                self._logged.add(key)
                logger.error(
                    "%s; until it is fixed every judged decision falls back to the judge-failure policy%s",
                    fatal,
                    " (check the judge's API key, judge.api_key_env)" if fatal.status in (401, 403) else "",
                )
            failed = JudgeError(str(fatal))
            failures = dict.fromkeys(assessable(self.config.checks, history), failed)
            return self._reflector._verdict(base, failures, JudgeUsage(), history)
        # Past the deadline. The requests already sent are not counted: their usage never arrived.
        late = JudgeError(f"{DEADLINE_PASSED} ({self.policy.deadline_ms:g} ms)")
        return self._reflector._verdict(
            base, dict.fromkeys(assessable(self.config.checks, history), late), JudgeUsage(), history
        )

    def _judge_skipped(
        self, rule: ToolRule | None, risk: RiskTier, base: dict[str, Any], correctable: bool
    ) -> str | None:
        """Why the judge is not asked about this call, or None to ask it."""
        if self.judge is None or not self.config.checks:
            return NO_JUDGE
        if rule is not None and rule.checks in ("static", "skip"):  # skip: the rule of a renamed call's tool
            return f"tool matched {rule.checks} rule {rule.match!r}: static checks only"
        if not base["static"].valid and not correctable and not self.config.continue_on_static:
            return STATIC_FAILED
        if self.policy.judge_when == "ungrounded" and risk == "low" and _grounded(base["grounding"]):
            return "cascade: low-risk tool and every argument value grounded in the conversation"
        return None

    def _action(self, result: ReflectionResult, risk: RiskTier, correctable: bool) -> tuple[GateAction, str]:
        static = result.static
        if not static.valid and not correctable:
            failing = [name for name, check in static.checks.items() if not check.passed]
            why = "static checks failed: " + ", ".join(failing)
            if static.correction is not None and self.policy.apply_corrections:
                why += f"; the correction {_suggestion_only(result.call, static.correction)}, so it is only suggested"
            return self.policy.on_invalid, why
        failed = [name for name, check in result.semantic.items() if check.status == "failed"]
        if failed:
            return self.policy.on_invalid, "judge checks failed: " + ", ".join(failed)
        unknown = [name for name, check in result.semantic.items() if check.status in ("error", "uncertain")]
        if unknown:
            fallback = self.policy.on_judge_failure[risk]
            why = self._judge_failure(result, unknown)
            if fallback == "allow":
                return ("modify" if correctable else "allow"), f"{why}; fail-open for {risk}-risk tool"
            return fallback, f"{why}; fail-closed for {risk}-risk tool"
        if correctable:
            return "modify", "static correction applied"
        return "allow", "valid"

    def _judge_failure(self, result: ReflectionResult, unknown: list[str]) -> str:
        errors = [result.semantic[name].error or "" for name in unknown if result.semantic[name].status == "error"]
        if not errors:
            return "judge uncertain on " + ", ".join(unknown)
        error = errors[0]
        detail = shorten(" ".join(error.split()), _REASON_DETAIL)
        if any(code in error for code in _AUTH_ERRORS):
            return f"judge authentication failed ({detail}); check the judge API key"
        if error.startswith(DEADLINE_PASSED):
            return f"judge did not answer within the {self.policy.deadline_ms:g} ms deadline"
        return f"judge failed ({detail})"

    def _finish(
        self, action: GateAction, raw: Any, call: ToolCall, reason: str, result: ReflectionResult | None, started: float
    ) -> Decision:
        shadow_action: GateAction | None = None
        run = raw
        if action == "modify" and result is not None and result.static.correction is not None:
            run = express_call(raw, result.static.correction)
        feedback = result.feedback(action=action) if action in _BLOCKING and result is not None else None
        remember(feedback)  # so it never counts as evidence when it comes back in a conversation
        if self.policy.shadow:
            shadow_action, action, run, feedback = action, "allow", raw, None
            reason = f"shadow mode, would {shadow_action}: {reason}"
        return trusted(
            Decision,
            action=action,
            call=run,
            feedback=feedback,
            reason=reason,
            result=result,
            latency_ms=(time.perf_counter() - started) * 1000,
            cost_usd=result.usage.cost_usd if result is not None else 0.0,
            shadow_action=shadow_action,
            tool=call.name,
        )


def _grounded(grounding: tuple[ValueGrounding, ...]) -> bool:
    """Every argument value found in the conversation (or equal to the spec's default)."""
    return all(any(source.kind in _TRUSTED_SOURCES for source in value.sources) for value in grounding)


def _applicable(call: ToolCall, correction: ToolCall, policy: GatePolicy) -> bool:
    """Whether the gate may run `correction` in place of `call`: never when it removes arguments
    (a filter or a safety flag may be among them), and a rename only when the policy allows it."""
    if _removes(call.arguments, correction.arguments):
        return False
    return correction.name == call.name or policy.apply_renames


def _suggestion_only(call: ToolCall, correction: ToolCall) -> str:
    """Why a correction is suggested rather than applied, for the decision's reason."""
    if _removes(call.arguments, correction.arguments):
        return "removes arguments"
    return "renames the tool"


def _removes(original: Any, corrected: Any) -> bool:
    """`corrected` lacks a key or an item that `original` has, at any depth."""
    if isinstance(original, dict):
        if not isinstance(corrected, dict):
            return bool(original)
        return any(key not in corrected or _removes(value, corrected[key]) for key, value in original.items())
    if isinstance(original, list):
        if not isinstance(corrected, list):
            return bool(original)
        return len(corrected) < len(original) or any(_removes(a, b) for a, b in zip(original, corrected, strict=False))
    return False


class _SyncRunner:
    """An event loop on a daemon thread for `Gate.check_sync`, with its own gate: an
    `httpx.AsyncClient` belongs to the loop it first ran on, so the blocking path never
    shares the async path's connections. Replies cached in memory are shared."""

    def __init__(self, gate: Gate):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reflection-gate", daemon=True)
        self._thread.start()
        judge = None if gate._owns_judge else gate.judge
        self.gate = Gate(gate.config, policy=gate.policy, judge=judge)
        self.gate._logged = gate._logged
        if gate._owns_judge and gate.judge is not None and self.gate.judge is not None:
            self.gate.judge.cache = gate.judge.cache

    def check(self, call: Any, tools: Any, history: Any) -> Decision | list[Decision]:
        return asyncio.run_coroutine_threadsafe(self.gate.check(call, tools, history), self._loop).result()

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.gate.aclose(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    @staticmethod
    def run_once(coroutine: Any) -> None:
        """Run `coroutine` to completion on a fresh loop on a worker thread (safe in a running loop)."""
        thread = threading.Thread(target=asyncio.run, args=(coroutine,), name="reflection-gate-close")
        thread.start()
        thread.join()
