"""What the fake judge and the stand-in servers share: reading a Chat Completions request,
writing a judge reply for the checks it asks about, and running a server on a thread."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from typing import Any, Self

from reflection._json import dumps, parse_json
from reflection.model import SEMANTIC_CHECKS

_SCHEMA_BLOCK = re.compile(r"<reply_schema>\s*(\{.*?\})\s*</reply_schema>", re.S)
_DATA_BLOCK = re.compile(r"<data>\s*(\{.*?\})\s*</data>", re.S)


def requested_checks(body: dict[str, Any]) -> list[str]:
    """The checks a judge request asks about: from `response_format`, else from the
    `<reply_schema>` block that every request carries."""
    fmt = body.get("response_format") or {}
    schema = (fmt.get("json_schema") or {}).get("schema") if isinstance(fmt, dict) else None
    if not isinstance(schema, dict):
        match = _SCHEMA_BLOCK.search(_user_text(body))
        schema = parse_json(match.group(1)) if match else {}
    names = list((schema.get("properties") or {}).keys())
    return [name for name in names if name in SEMANTIC_CHECKS] or names


def request_data(body: dict[str, Any]) -> dict[str, Any]:
    """The decoded `<data>` block of a judge request ({} when absent)."""
    match = _DATA_BLOCK.search(_user_text(body))
    return parse_json(match.group(1)) if match else {}


def _user_text(body: dict[str, Any]) -> str:
    return "\n".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user")


SCORE_REQUEST = ("explanation", "score")
"""What a scoring request (`reflection.scoring`'s judged metrics) asks for, in place of checks."""


def score_reply(score: int, explanation: str = "") -> dict[str, Any]:
    """A reply to a scoring request: a 1-5 score with its explanation."""
    return {"explanation": explanation or f"scored {score}", "score": score}


def check_reply(
    score: int,
    *,
    explanation: str = "",
    evidence: list[str] | None = None,
    confidence: float = 0.9,
    correction: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One check's reply object in the judge's reply schema."""
    if correction is not None:
        correction = {
            "suggested_arguments_json": None,
            "better_function": None,
            "missing_prerequisite": None,
            **correction,
        }
        if isinstance(correction["suggested_arguments_json"], dict):
            correction["suggested_arguments_json"] = dumps(correction["suggested_arguments_json"])
    return {
        "evidence": evidence or [],
        "explanation": explanation or f"scored {score}",
        "confidence": confidence,
        "score": score,
        "correction": correction,
    }


def completion(
    content: str | None, body: dict[str, Any], *, cached_tokens: int = 0, finish_reason: str = "stop", **message: Any
) -> dict[str, Any]:
    """A Chat Completions response carrying `content` (and any other `message` fields, such
    as `tool_calls` or `reasoning_content`), with token usage estimated from sizes."""
    prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
    prompt_tokens = max(1, prompt_chars // 4)
    completion_tokens = max(1, len(content or "") // 4)
    return {
        "id": "chatcmpl-reflection-test",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "judge"),
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": content, **message},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


# --- reply styles: how real models and servers wrap the same answer ------------------------

REPLY_STYLES: tuple[str, ...] = (
    "exact",  # one JSON object in our schema, as structured output gives it
    "prose",  # "Here is my assessment: {...} Let me know if ..."
    "fenced",  # a ```json fence between prose
    "think",  # a <think> block (holding a different draft object) before the JSON
    "reasoning_content",  # the reasoning (and a draft) in `reasoning_content` beside `content`
    "reasoning",  # the same in a `reasoning` field
    "string_scores",  # scores as "4" or 4.0
    "percent_confidence",  # confidence as 85 or "85%"
    "confidence_words",  # confidence as "high" / "medium" / "low"
    "evidence_string",  # evidence as one string instead of a list
    "missing_optional",  # no confidence, evidence or correction
    "extra_keys",  # unknown keys beside the answers and inside them
    "wrapped",  # the answers under one wrapper key: {"checks": {...}}
    "case_names",  # check names in upper case
    "bad_correction",  # prose for suggested_arguments_json, a better_function that is no tool
    "single_quotes",  # near-JSON: single-quoted strings
    "python_literals",  # near-JSON: Python's repr, True / None
    "trailing_commas",  # near-JSON: a comma before every closing bracket
    "double_encoded",  # the object encoded again as a JSON string
    "tool_call",  # `content: null`, the JSON in a tool call's arguments
    "truncated",  # cut in the middle, finish_reason "length" (see TRUNCATED_BUDGET)
    "empty",  # an empty message the first time a request is seen
    "mixture",  # each request in one of the styles above, picked from its content
)
"""The `reply_style` values of `FakeJudge` and `StandInJudge`."""

TRUNCATED_BUDGET = 2048
"""The "truncated" style cuts replies to requests whose completion budget
(`max_completion_tokens`, else `max_tokens`) is at most this (the client's default); a
request with a larger budget, as a re-ask after a truncation sends, gets the whole reply."""

_MIXED = REPLY_STYLES[:-1]
_VALUE_STYLES = {
    "string_scores",
    "percent_confidence",
    "confidence_words",
    "evidence_string",
    "missing_optional",
    "extra_keys",
    "wrapped",
    "case_names",
    "bad_correction",
}


class ReplyStyler:
    """Writes a judge's reply object as a completion in one of `REPLY_STYLES`.

    Deterministic: "mixture" picks the style from a hash of the request's messages, and
    "empty" answers a request empty the first time its messages are seen, in full after.
    Styles that change values (scores as text, wrapped answers...) apply to check replies;
    a scoring request's reply gets only the styles that change its wrapping.
    """

    def __init__(self, style: str = "exact"):
        if style not in REPLY_STYLES:
            raise ValueError(f"unknown reply style {style!r}; choose from {', '.join(REPLY_STYLES)}")
        self.style = style
        self._seen: set[bytes] = set()
        self.counts: dict[str, int] = {}
        """Replies written per style."""

    def completion(self, reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The completion answering `body` with `reply`, in this styler's style."""
        if self.style == "exact":
            return completion(dumps(reply), body)
        digest = hashlib.sha1(dumps(body.get("messages", [])).encode()).digest()
        style = _MIXED[int.from_bytes(digest[:4], "big") % len(_MIXED)] if self.style == "mixture" else self.style
        self.counts[style] = self.counts.get(style, 0) + 1
        if style == "empty":
            if digest not in self._seen:
                if len(self._seen) > 100_000:  # bounded memory for a long-running stand-in
                    self._seen.clear()
                self._seen.add(digest)
                return completion("", body)
            return completion(dumps(reply), body)
        if style in _VALUE_STYLES:
            if "score" in reply:  # a scoring request: no checks to restyle
                return completion(dumps(reply), body)
            return completion(dumps(_restyle(style, reply)), body)
        return _wrapped(style, reply, body)


def _restyle(style: str, reply: dict[str, Any]) -> dict[str, Any]:
    """The answers of a check reply, with their values written the way `style` names."""
    if style == "wrapped":
        return {"checks": reply}
    if style == "case_names":
        return {name.upper(): answer for name, answer in reply.items()}
    out: dict[str, Any] = {}
    for i, (name, answer) in enumerate(reply.items()):
        answer = dict(answer)
        confidence = answer["confidence"]
        if style == "string_scores":
            answer["score"] = str(answer["score"]) if i % 2 == 0 else float(answer["score"])
        elif style == "percent_confidence":
            answer["confidence"] = round(confidence * 100) if i % 2 == 0 else f"{round(confidence * 100)}%"
        elif style == "confidence_words":
            answer["confidence"] = "high" if confidence >= 0.8 else "medium" if confidence >= 0.5 else "low"
        elif style == "evidence_string":
            answer["evidence"] = answer["evidence"][0] if answer["evidence"] else "the user's request"
        elif style == "missing_optional":
            for key in ("confidence", "evidence", "correction"):
                answer.pop(key, None)
        elif style == "extra_keys":
            answer["reasoning"] = "checked the values against the conversation"
            answer["passed"] = answer["score"] >= 3
        elif style == "bad_correction":
            answer["correction"] = {
                "suggested_arguments_json": "use the date the user gave",
                "better_function": "a_tool_that_does_not_exist",
                "missing_prerequisite": None,
            }
        out[name] = answer
    if style == "extra_keys":
        out["summary"] = "overall the call looks as reviewed above"
    return out


def _draft(reply: dict[str, Any]) -> dict[str, Any]:
    """A different object than the answer (every score flipped), as a reasoning draft holds:
    a reader that took it would give the wrong verdict."""
    if "score" in reply:
        return {**reply, "score": 6 - reply["score"]}
    return {name: {**answer, "score": 6 - answer["score"]} for name, answer in reply.items()}


def _wrapped(style: str, reply: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    text = dumps(reply)
    if style == "exact":
        return completion(text, body)
    if style == "prose":
        return completion(
            f"Here is my assessment of the tool call: {text} Let me know if you need anything else.", body
        )
    if style == "fenced":
        pretty = json.dumps(reply, indent=2, ensure_ascii=False)
        return completion(
            f"I reviewed the call against the conversation.\n\n```json\n{pretty}\n```\n\n"
            "Let me know if you need anything else.",
            body,
        )
    if style == "think":
        return completion(
            f"<think>\nA first draft: {dumps(_draft(reply))}\nOn reflection I revise it.\n</think>\n\n{text}", body
        )
    if style in ("reasoning_content", "reasoning"):
        reasoning: dict[str, Any] = {style: f"A first draft: {dumps(_draft(reply))}. On reflection I revise it."}
        return completion(text, body, **reasoning)
    if style == "single_quotes":
        return completion(_near_json(reply, quote="'"), body)
    if style == "python_literals":
        return completion(repr(reply), body)
    if style == "trailing_commas":
        return completion(_near_json(reply, trailing=True), body)
    if style == "double_encoded":
        return completion(dumps(text), body)
    if style == "tool_call":
        call = {"id": "call_review", "type": "function", "function": {"name": "tool_call_review", "arguments": text}}
        return completion(None, body, finish_reason="tool_calls", tool_calls=[call])
    if style == "truncated":
        budget = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if budget > TRUNCATED_BUDGET:
            return completion(text, body)
        return completion(text[: len(text) * 3 // 5], body, finish_reason="length")
    raise AssertionError(f"unhandled reply style {style}")


def _near_json(value: Any, *, quote: str = '"', trailing: bool = False) -> str:
    """JSON text with single-quoted strings and/or a trailing comma in every container."""
    if isinstance(value, dict):
        items = [
            f"{_near_json(k, quote=quote)}: {_near_json(v, quote=quote, trailing=trailing)}" for k, v in value.items()
        ]
        return "{" + ", ".join(items) + ("," if trailing and items else "") + "}"
    if isinstance(value, list):
        items = [_near_json(v, quote=quote, trailing=trailing) for v in value]
        return "[" + ", ".join(items) + ("," if trailing and items else "") + "]"
    if isinstance(value, str) and quote == "'":
        inner = json.dumps(value, ensure_ascii=False)[1:-1].replace('\\"', '"').replace("'", "\\'")
        return f"'{inner}'"
    return dumps(value)


class BackgroundServer:
    """A stand-in server on a background thread: `with Server(...) as server:` serves on
    127.0.0.1 until the block ends. A subclass's `serve()` binds `port` and sets `_ready`;
    its `stop()` ends `serve()` and joins `_thread`."""

    _thread_name = "stand-in server"
    port: int
    _ready: threading.Event
    _thread: threading.Thread | None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ending in /v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Serve on a background thread; returns once the port is bound."""
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.serve()), name=self._thread_name.replace(" ", "-"), daemon=True
        )
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the {self._thread_name} did not start within 10 s")

    def run_in_foreground(self) -> None:
        """Serve in this thread until the server stops itself, printing the base URL on
        stdout once the port is bound (the command-line entry points)."""

        async def run() -> None:
            task = asyncio.create_task(self.serve())
            while not self._ready.is_set():
                await asyncio.sleep(0.01)
            print(self.base_url, flush=True)
            await task

        asyncio.run(run())

    async def serve(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError
