"""Offline testing kit: a fake judge mocked at the HTTP layer (respx), so the real client
code runs — request building, structured output, retries, validation and cost.

    from reflection import Reflector, ReflectionConfig
    from reflection.testing import FakeJudge

    async def test_my_agent_rejects_invented_ids():
        with FakeJudge() as judge:                      # all checks pass by default
            judge.script("general_hallucination_check", score=1, explanation="id invented")
            async with Reflector(ReflectionConfig(judge=judge.config)) as reflector:
                result = await reflector.reflect(call, tools, history)
        assert result.overall_valid is False

With the pytest plugin (installed with the package) the `fake_judge` fixture gives the same
object, entered for the test's duration. In a user's own suite, `assert_valid_call(call,
tools, history, config=...)` reflects a call and fails with the failing checks and evidence. `FakeJudge` needs the `testing` extra (respx); this
package itself, the plugin and `reflection.testing.server` load without it.

One of the four public subpackages (`reflection.batch`, `reflection.scoring`, `reflection.testing`
and `reflection.integrations`, see `reflection`): its public API is `__all__`.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from reflection._json import dumps, parse_json
from reflection.judge import JudgeConfig
from reflection.testing._assert import assert_valid_call
from reflection.testing._protocol import (
    REPLY_STYLES,
    SCORE_REQUEST,
    TRUNCATED_BUDGET,
    ReplyStyler,
    check_reply,
    completion,
    request_data,
    requested_checks,
    score_reply,
)

__all__ = ["REPLY_STYLES", "TRUNCATED_BUDGET", "FakeJudge", "RecordedRequest", "assert_valid_call", "check_reply"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake judge received."""

    body: dict[str, Any]
    checks: list[str]
    data: dict[str, Any]
    """The decoded `<data>` block: what the judge was shown about the call."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages sent."""
        return self.body.get("messages", [])

    @property
    def prompt(self) -> str:
        """All message contents joined, for assertions on prompt text."""
        return "\n".join(m.get("content") or "" for m in self.messages)


class FakeJudge:
    """A scripted OpenAI-compatible judge at `base_url`, intercepted with respx.

    - Every check scores 5 unless scripted with `script(check, score=...)`.
    - `fail(status, times)` makes the next requests fail with an HTTP status;
      `reply_raw(text, times)` sends raw content (e.g. not JSON) instead of a reply.
    - `strict=True`: a request for a check that was not scripted is unexpected; it gets
      HTTP 418 and the fake raises AssertionError when it exits.
    - `requests` records every request, with the prompt and the decoded data block.
    - `reply_style` writes the replies the way real models and servers do (`REPLY_STYLES`:
      prose around the JSON, a `<think>` block, scores as text, near-JSON, a tool call...;
      "mixture" picks one per request). Scripted scores stay what they are.
    """

    def __init__(
        self,
        *,
        base_url: str = "http://fake-judge.test/v1",
        model: str = "fake-judge",
        strict: bool = False,
        max_attempts: int = 3,
        reply_style: str = "exact",
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.strict = strict
        self.config = JudgeConfig(
            base_url=self.base_url,
            model=model,
            api_key=SecretStr("fake-key"),
            max_attempts=max_attempts,
            retry_max_wait=0.0,
        )
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[str] = []
        self._scripts: dict[str, dict[str, Any]] = {}
        self._styler = ReplyStyler(reply_style)
        self._queued: collections.deque[tuple[str, Any]] = collections.deque()
        try:
            import respx  # the `testing` extra; imported here so the plugin loads without it
        except ImportError:
            raise ImportError(
                'FakeJudge (and the fake_judge fixture) needs respx: pip install "toolcall-reflection[testing]"'
            ) from None
        self._router = respx.mock(base_url=self.base_url, assert_all_called=False, assert_all_mocked=True)
        self._router.post("/chat/completions").mock(side_effect=self._handle)

    def script(
        self,
        check: str,
        *,
        score: int,
        explanation: str = "",
        evidence: list[str] | None = None,
        confidence: float = 0.9,
        correction: dict[str, Any] | None = None,
    ) -> FakeJudge:
        """Set the reply for `check` on every later request that asks about it. The check
        `"score"` sets the reply to scoring requests (`reflection.scoring`'s judged metrics),
        which take only `score` and `explanation`."""
        if check == "score":
            self._scripts[check] = score_reply(score, explanation)
        else:
            self._scripts[check] = check_reply(
                score, explanation=explanation, evidence=evidence, confidence=confidence, correction=correction
            )
        return self

    @property
    def reply_style(self) -> str:
        """How replies are written (one of `REPLY_STYLES`); settable."""
        return self._styler.style

    @reply_style.setter
    def reply_style(self, style: str) -> None:
        self._styler = ReplyStyler(style)

    def fail(self, status: int = 500, times: int = 1, headers: dict[str, str] | None = None) -> FakeJudge:
        """Answer the next `times` requests with HTTP `status`."""
        self._queued.extend([("status", (status, headers or {}))] * times)
        return self

    def reply_raw(self, content: str, times: int = 1) -> FakeJudge:
        """Answer the next `times` requests with `content` as the message text."""
        self._queued.extend([("raw", content)] * times)
        return self

    def reply_json(self, reply: dict[str, Any], times: int = 1) -> FakeJudge:
        """Answer the next `times` requests with this exact reply object."""
        return self.reply_raw(dumps(reply), times)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        body = parse_json(request.content)
        checks = requested_checks(body)
        self.requests.append(RecordedRequest(body=body, checks=checks, data=request_data(body)))
        if self._queued:
            kind, value = self._queued.popleft()
            if kind == "status":
                status, headers = value
                return httpx.Response(
                    status, json={"error": {"message": f"fake judge status {status}"}}, headers=headers
                )
            return httpx.Response(200, json=completion(value, body))
        if tuple(checks) == SCORE_REQUEST:
            reply = self._scripts.get("score") or score_reply(5, "fake judge default: pass")
            return httpx.Response(200, json=self._styler.completion(reply, body))
        unscripted = [c for c in checks if c not in self._scripts]
        if self.strict and unscripted:
            self.unexpected.append(f"request for unscripted checks {unscripted}")
            return httpx.Response(
                418, json={"error": {"message": f"strict fake judge: unscripted checks {unscripted}"}}
            )
        reply = {
            name: self._scripts.get(name) or check_reply(5, explanation="fake judge default: pass") for name in checks
        }
        return httpx.Response(200, json=self._styler.completion(reply, body))

    def __enter__(self) -> FakeJudge:
        self._router.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._router.__exit__(*exc_info)
        if self.strict and self.unexpected and exc_info[0] is None:
            raise AssertionError("strict FakeJudge got unexpected requests: " + "; ".join(self.unexpected))

    async def __aenter__(self) -> FakeJudge:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)
