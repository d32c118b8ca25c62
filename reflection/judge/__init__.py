"""The judge: the only part of reflection that talks to a model server.

    from reflection.judge import Judge, JudgeConfig, build_judge

    async with build_judge(JudgeConfig(base_url=..., model=...)) as judge:
        answer = await judge.ask(messages, schema=..., schema_name=..., validate=...)

Modules: `client` (`Judge`, `build_judge`, `request_key`), `config` (`JudgeConfig`, `Price`),
`reply` (reading a judge's reply into its JSON object), `cache` (`JudgeCache`,
`SQLiteJudgeCache`, `MemoryJudgeCache`), `prices` (what its tokens cost), `transport` (the
default HTTP client). The errors live in `reflection.errors` and are exported here too.

The names below load on first use (PEP 562): `reflection.config` and static-only use import
`reflection.judge.config` without loading httpx, tenacity or aiosqlite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reflection._lazy import lazy_attributes

if TYPE_CHECKING:
    from reflection.errors import (
        InvalidReply,
        JudgeConnectionError,
        JudgeError,
        JudgeFatalError,
        JudgeRequestError,
        JudgeStatusError,
        JudgeTimeout,
        UnreadableReply,
    )
    from reflection.judge.cache import JudgeCache, MemoryJudgeCache, SQLiteJudgeCache
    from reflection.judge.client import Judge, JudgeAnswer, build_judge, request_key, reraise_fatal
    from reflection.judge.config import JudgeConfig, Price
    from reflection.judge.reply import RepairedObject, read_json, reply_text
    from reflection.judge.transport import ShardedTransport, judge_http_client

# Where each public name lives; `__getattr__` imports it from there on first use.
_HOMES = {
    "Judge": "reflection.judge.client",
    "JudgeAnswer": "reflection.judge.client",
    "build_judge": "reflection.judge.client",
    "request_key": "reflection.judge.client",
    "reraise_fatal": "reflection.judge.client",
    "JudgeConfig": "reflection.judge.config",
    "Price": "reflection.judge.config",
    "JudgeCache": "reflection.judge.cache",
    "MemoryJudgeCache": "reflection.judge.cache",
    "SQLiteJudgeCache": "reflection.judge.cache",
    "RepairedObject": "reflection.judge.reply",
    "read_json": "reflection.judge.reply",
    "reply_text": "reflection.judge.reply",
    "ShardedTransport": "reflection.judge.transport",
    "judge_http_client": "reflection.judge.transport",
    "InvalidReply": "reflection.errors",
    "JudgeConnectionError": "reflection.errors",
    "JudgeError": "reflection.errors",
    "JudgeFatalError": "reflection.errors",
    "JudgeRequestError": "reflection.errors",
    "JudgeStatusError": "reflection.errors",
    "JudgeTimeout": "reflection.errors",
    "UnreadableReply": "reflection.errors",
}

__all__ = [
    "InvalidReply",
    "Judge",
    "JudgeAnswer",
    "JudgeCache",
    "JudgeConfig",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeFatalError",
    "JudgeRequestError",
    "JudgeStatusError",
    "JudgeTimeout",
    "MemoryJudgeCache",
    "Price",
    "RepairedObject",
    "SQLiteJudgeCache",
    "ShardedTransport",
    "UnreadableReply",
    "build_judge",
    "judge_http_client",
    "read_json",
    "reply_text",
    "request_key",
    "reraise_fatal",
]

__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, __all__)
