"""Metrics for an agent's final text answer against a reference answer.

`exact_match`, `rouge_l` and `meteor` are deterministic; `response_correctness` asks a judge.
METEOR's synonym stage reads WordNet from a local copy only (see `find_wordnet`); nothing is
ever downloaded.
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reflection.formats import normalize_history
from reflection.scoring._judged import JudgedScore, ask_score

if TYPE_CHECKING:
    from reflection.judge import Judge

__all__ = ["exact_match", "find_wordnet", "meteor", "normalize_text", "response_correctness", "rouge_l"]

_SPACE = re.compile(r"\s+")
# Letters and digits of any script; ideographs and kana are one token each, because those
# scripts do not separate words with spaces.
_TOKEN = re.compile(r"[\u2e80-\u2fdf\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]|[^\W_]+")
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

    Needs the `metrics` extra (`pip install 'toolcall-reflection[metrics]'`). Two differences from
    `rouge-score`'s default tokenizer, which keeps only ASCII letters and digits: words in
    any script are kept (so non-English answers do not score 0), and CJK characters count
    one token each. On ASCII text the tokens are the same. Two answers with no tokens at all
    score 1.0 when they are equal after normalisation, else 0.0.
    """
    scorer, tokenizer = rouge_l_scorer(use_stemmer)
    if not tokenizer.tokenize(prediction) and not tokenizer.tokenize(reference):
        return exact_match(prediction, reference)
    return float(scorer.score(reference, prediction)["rougeL"].fmeasure)


@lru_cache(maxsize=2)
def rouge_l_scorer(use_stemmer: bool) -> tuple[Any, Any]:
    """`rouge-score`'s ROUGE-L scorer with `rouge_l`'s tokenizer, and that tokenizer (made once
    per `use_stemmer`); ImportError without the `metrics` extra."""
    try:
        from nltk.stem import porter
        from rouge_score import rouge_scorer, tokenizers
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "rouge_l needs the optional 'metrics' extra: pip install 'toolcall-reflection[metrics]'"
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
            return [self._stemmer.stem(t) if len(t) > 3 and _ASCII_WORD.fullmatch(t) else t for t in tokens]

    tokenizer = UnicodeTokenizer()
    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=tokenizer), tokenizer


DEBIAN_WORDNET = Path("/usr/share/wordnet")
"""Where Debian's `wordnet-base` package installs the WordNet 3.0 database."""
# WordNet 3.0's lexicographer files, in number order (lexnames(5WN)). NLTK's reader needs the
# `lexnames` file, which Debian's wordnet-base does not ship; the list is fixed for 3.0.
_LEXNAMES = (  # noqa: SIM905 - a paragraph of names as lexnames(5WN) lists them, not 45 lines
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_POS_NUMBER = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


def find_wordnet(path: str | Path | None = None) -> Path | None:
    """The WordNet database METEOR's synonym stage reads, from a local copy only.

    In order: `path` (e.g. `wordnet:` in the config), the `REFLECTION_WORDNET` environment
    variable, NLTK's data path (`corpora/wordnet`, as `nltk.download` leaves it), and the
    WordNet 3.0 database of Debian's `wordnet-base` package (`/usr/share/wordnet`). None when
    there is none: METEOR then matches exact words and stems only. Raises ValueError when
    `path` or `REFLECTION_WORDNET` names something that is not a WordNet database directory.
    """
    for given, source in (
        (path, "the wordnet path"),
        (os.environ.get("REFLECTION_WORDNET") or None, "REFLECTION_WORDNET"),
    ):
        if given is not None:
            folder = Path(given).expanduser()
            if not _is_wordnet(folder):
                raise ValueError(
                    f"{source} {str(folder)!r} is not a WordNet database directory "
                    "(it needs index.noun and data.noun, as in /usr/share/wordnet)"
                )
            return folder.resolve()
    try:
        import nltk
    except ImportError:
        nltk = None
    if nltk is not None:
        try:
            found = nltk.data.find("corpora/wordnet")  # looks on disk only; never downloads
        except LookupError:
            pass
        else:
            folder = Path(str(getattr(found, "path", found)))
            if _is_wordnet(folder):
                return folder.resolve()
    return DEBIAN_WORDNET if _is_wordnet(DEBIAN_WORDNET) else None


def _is_wordnet(folder: Path) -> bool:
    return (folder / "index.noun").is_file() and (folder / "data.noun").is_file()


def meteor(prediction: str, reference: str, *, wordnet: str | Path | None = None, synonyms: bool = True) -> float:
    """METEOR (Banerjee and Lavie, 2005) of `prediction` against `reference`, from NLTK's
    `meteor_score`: unigram matches by exact form, then Porter stem, then WordNet synonym,
    with a fragmentation penalty.

    Needs the `metrics` extra (`pip install 'toolcall-reflection[metrics]'`). Tokens are `rouge_l`'s,
    unstemmed (METEOR stems on its own): words in any script, lower-cased, CJK characters
    one token each. The synonym stage uses the WordNet `find_wordnet(wordnet)` locates; with
    none, or with `synonyms=False`, METEOR runs with exact and stem matching only. Two answers
    with no tokens at all score 1.0 when they are equal after normalisation, else 0.0.
    """
    return meteor_with(prediction, reference, find_wordnet(wordnet) if synonyms else None)


def meteor_with(prediction: str, reference: str, wordnet_folder: Path | None) -> float:
    """`meteor` with the WordNet folder already found (None: no synonym stage), for callers
    scoring many rows with one WordNet."""
    from nltk.translate.meteor_score import meteor_score

    hypothesis, expected = _tokens(prediction), _tokens(reference)
    if not hypothesis or not expected:
        return exact_match(prediction, reference) if not hypothesis and not expected else 0.0
    reader = _wordnet_reader(str(wordnet_folder)) if wordnet_folder is not None else _NO_SYNONYMS
    return float(meteor_score([expected], hypothesis, wordnet=reader))


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


class _NoSynonyms:
    """Stands in for a WordNet reader with no entries: METEOR's synonym stage matches nothing."""

    def synsets(self, word: str) -> list[Any]:
        return []


_NO_SYNONYMS = _NoSynonyms()


@lru_cache(maxsize=4)
def _wordnet_reader(folder: str) -> Any:
    """NLTK's WordNet reader over a database directory (loaded once per directory, ~1 s)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class LocalWordNet(WordNetCorpusReader):
        """A plain WordNet 3.0 dict directory: `lexnames` supplied when missing, and no
        mapping to NLTK's packaged copy (which may be absent; both are 3.0)."""

        def open(self, file: str) -> Any:
            if file == "lexnames" and not (Path(folder) / "lexnames").is_file():
                return io.StringIO(
                    "".join(f"{i:02d}\t{name}\t{_POS_NUMBER[name.split('.')[0]]}\n" for i, name in enumerate(_LEXNAMES))
                )
            return super().open(file)

        def map_wn(self, version: str = "wordnet") -> None:
            return None

    # NLTK's path sentinel reads only under its data path; the user named or installed this one.
    if folder not in nltk.data.path:
        nltk.data.path.append(folder)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "multilingual functions are not available": not used here
            return LocalWordNet(folder, None)
    except (OSError, ValueError, AssertionError) as exc:
        raise ValueError(f"the WordNet database in {folder!r} could not be read: {exc}") from exc


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
    request: Any = (
        query
        if isinstance(query, str)
        else [{"role": m.role, "content": m.content} for m in normalize_history(query).messages]
    )
    data = {"user_request": request, "agent_answer": prediction, "reference_answer": reference}
    return await ask_score(judge, "scoring/response_correctness", data, prompts_dir=prompts_dir)
