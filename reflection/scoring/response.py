"""Metrics for an agent's final text answer against a reference answer.

`exact_match` and `rouge_l` are deterministic; `response_correctness` asks a judge.
METEOR is not offered: every maintained implementation needs WordNet, which is downloaded
from the internet at run time, and no maintained package ships it for offline use.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reflection.formats import normalize_history
from reflection.scoring._judged import JudgedScore, ask_score

if TYPE_CHECKING:
    from reflection.judge import Judge

__all__ = ["exact_match", "normalize_text", "response_correctness", "rouge_l"]

_SPACE = re.compile(r"\s+")
# Letters and digits of any script; ideographs and kana are one token each, because those
# scripts do not separate words with spaces.
_TOKEN = re.compile(
    r"[\u2e80-\u2fdf\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]|[^\W_]+"
)
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def normalize_text(text: str) -> str:
    """Unicode NFKC, case-folded, whitespace collapsed and trimmed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def exact_match(prediction: str, reference: str, *, normalize: bool = True) -> float:
    """1.0 when the answers are the same text, else 0.0.

    With `normalize` (the default) both sides go through `normalize_text` first, so case,
    Unicode compatibility forms and runs of whitespace do not count; without it, the strings
    must be identical.
    """
    if normalize:
        return 1.0 if normalize_text(prediction) == normalize_text(reference) else 0.0
    return 1.0 if prediction == reference else 0.0


def rouge_l(prediction: str, reference: str, *, use_stemmer: bool = True) -> float:
    """ROUGE-L F-measure (longest common subsequence of tokens), from Google's `rouge-score`.

    Needs the `metrics` extra (`pip install 'reflection[metrics]'`). Two differences from
    `rouge-score`'s default tokenizer, which keeps only ASCII letters and digits: words in
    any script are kept (so non-English answers do not score 0), and CJK characters count
    one token each. On ASCII text the tokens are the same. Two answers with no tokens at all
    score 1.0 when they are equal after normalisation, else 0.0.
    """
    scorer, tokenizer = _rouge_scorer(use_stemmer)
    if not tokenizer.tokenize(prediction) and not tokenizer.tokenize(reference):
        return exact_match(prediction, reference)
    return float(scorer.score(reference, prediction)["rougeL"].fmeasure)


@lru_cache(maxsize=2)
def _rouge_scorer(use_stemmer: bool) -> tuple[Any, Any]:
    try:
        from nltk.stem import porter  # type: ignore[import-untyped]
        from rouge_score import rouge_scorer, tokenizers  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "rouge_l needs the optional 'metrics' extra: pip install 'reflection[metrics]'"
        ) from exc

    class UnicodeTokenizer(tokenizers.Tokenizer):
        """rouge-score's tokenizer rules (lower case, split on non-alphanumerics, Porter stem
        of ASCII words longer than 3 letters), extended to every script."""

        def __init__(self) -> None:
            self._stemmer = porter.PorterStemmer() if use_stemmer else None

        def tokenize(self, text: str) -> list[str]:
            tokens = _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())
            if self._stemmer is None:
                return tokens
            return [
                self._stemmer.stem(t) if len(t) > 3 and _ASCII_WORD.fullmatch(t) else t for t in tokens
            ]

    tokenizer = UnicodeTokenizer()
    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=tokenizer), tokenizer


async def response_correctness(
    judge: Judge,
    *,
    prediction: str,
    reference: str,
    query: Any = "",
    prompts_dir: Path | None = None,
) -> JudgedScore:
    """An LLM judge's correctness score for `prediction` against `reference`, in [0, 1].

    The judge scores factual agreement 1-5 (normalised as (score - 1) / 4) and explains.
    `query` is the user's request, a string or a conversation. Raises
    `reflection.judge.JudgeError` when the judge cannot answer.
    """
    request: Any = query if isinstance(query, str) else [
        {"role": m.role, "content": m.content} for m in normalize_history(query).messages
    ]
    data = {"user_request": request, "agent_answer": prediction, "reference_answer": reference}
    return await ask_score(judge, "scoring/response_correctness", data, prompts_dir=prompts_dir)
