"""What the fake judge and the stand-in server share: reading a Chat Completions request
and writing a judge reply for the checks it asks about."""

from __future__ import annotations

import re
from typing import Any

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


def check_reply(score: int, *, explanation: str = "", evidence: list[str] | None = None,
                confidence: float = 0.9, correction: dict[str, Any] | None = None) -> dict[str, Any]:
    """One check's reply object in the judge's reply schema."""
    if correction is not None:
        correction = {"suggested_arguments_json": None, "better_function": None, "missing_prerequisite": None, **correction}
        if isinstance(correction["suggested_arguments_json"], dict):
            correction["suggested_arguments_json"] = dumps(correction["suggested_arguments_json"])
    return {
        "evidence": evidence or [],
        "explanation": explanation or f"scored {score}",
        "confidence": confidence,
        "score": score,
        "correction": correction,
    }


def completion(content: str, body: dict[str, Any], *, cached_tokens: int = 0) -> dict[str, Any]:
    """A Chat Completions response carrying `content`, with token usage estimated from sizes."""
    prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
    prompt_tokens = max(1, prompt_chars // 4)
    completion_tokens = max(1, len(content) // 4)
    return {
        "id": "chatcmpl-reflection-test",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "judge"),
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }
