"""METEOR: parity with NLTK's own `meteor_score` on the same tokens, with WordNet synonyms and
without, where WordNet comes from, and METEOR in `reflection score`."""

import json

import nltk
import pytest
from nltk.translate.meteor_score import meteor_score
from typer.testing import CliRunner

import reflection.scoring.response as response
from reflection.scoring import find_wordnet, meteor, score_files
from tests.scoring.test_scoring_cli import app, write

NEEDS_WORDNET = pytest.mark.skipif(
    find_wordnet() is None,
    reason="needs a local WordNet database: apt-get install wordnet-base (or set REFLECTION_WORDNET)",
)

PAIRS = [
    ("the cat sat on the mat", "the cat sat on the mat"),
    ("the automobile is quick", "the car is fast"),
    ("It is raining in Paris today.", "Today it rains in Paris."),
    ("He bought a large house near the sea", "He purchased a big home by the ocean"),
    ("The meeting was moved to Tuesday", "The meeting has been rescheduled for Tuesday"),
    ("running runners ran", "the runner runs"),
    ("Café au lait, s'il vous plaît", "café au lait s'il vous plait"),
    ("东京是日本的首都", "日本的首都是东京"),
    ("no overlap whatsoever", "completely different words"),
    ("Rainy.", "Rainy."),
    ("42 orders last week", "there were 42 orders in the last week"),
]


@pytest.fixture
def no_wordnet(monkeypatch, tmp_path):
    """No WordNet anywhere: no REFLECTION_WORDNET, nothing on NLTK's data path, no Debian copy."""
    monkeypatch.delenv("REFLECTION_WORDNET", raising=False)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")])
    monkeypatch.setattr(response, "DEBIAN_WORDNET", tmp_path / "wordnet")
    assert find_wordnet() is None


class Empty:
    """A WordNet with no entries, as NLTK's meteor_score takes it: its synonym stage matches nothing."""

    def synsets(self, word):
        return []


def tokens(text):
    return response._tokens(text)


@NEEDS_WORDNET
@pytest.mark.parametrize(("prediction", "reference"), PAIRS)
def test_meteor_with_wordnet_is_nltks_meteor_score_on_the_same_tokens(prediction, reference):
    wordnet = response._wordnet_reader(str(find_wordnet()))
    assert meteor(prediction, reference) == meteor_score([tokens(reference)], tokens(prediction), wordnet=wordnet)


@pytest.mark.parametrize(("prediction", "reference"), PAIRS)
def test_meteor_without_wordnet_is_nltks_meteor_score_with_no_synonyms(prediction, reference, no_wordnet):
    assert meteor(prediction, reference) == meteor_score([tokens(reference)], tokens(prediction), wordnet=Empty())
    assert meteor(prediction, reference, synonyms=False) == meteor(prediction, reference)


@NEEDS_WORDNET
def test_synonyms_raise_the_score_only_where_wordnet_knows_them():
    assert meteor("the automobile is quick", "the car is fast") > meteor(
        "the automobile is quick", "the car is fast", synonyms=False
    )
    assert meteor("the cat sat on the mat", "the cat sat on a mat") == meteor(
        "the cat sat on the mat", "the cat sat on a mat", synonyms=False
    )


@NEEDS_WORDNET
def test_the_debian_database_reads_as_wordnet_3_0():
    wordnet = response._wordnet_reader(str(find_wordnet()))
    assert wordnet.get_version() == "3.0"
    assert "automobile" in wordnet.synsets("car")[0].lemma_names()
    assert wordnet.synsets("dog")[0].lexname() == "noun.animal"  # the lexnames list supplied for Debian's copy


def test_tokens_are_rouges_unstemmed():
    assert tokens("The Runners ran, 東京!") == ["the", "runners", "ran", "東", "京"]


def test_answers_without_tokens():
    assert meteor("...", "...") == 1.0
    assert meteor("...", "Paris") == 0.0


@NEEDS_WORDNET
def test_a_wordnet_path_is_used_as_given(monkeypatch):
    folder = find_wordnet()
    monkeypatch.setenv("REFLECTION_WORDNET", str(folder))
    assert find_wordnet() == folder
    assert find_wordnet(folder) == folder


def test_a_wordnet_path_without_wordnet_is_a_clear_error(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="is not a WordNet database directory"):
        find_wordnet(tmp_path)
    monkeypatch.setenv("REFLECTION_WORDNET", str(tmp_path))
    with pytest.raises(ValueError, match="REFLECTION_WORDNET"):
        find_wordnet()


# --- reflection score --------------------------------------------------------------------------


def files(tmp_path):
    predictions = write(
        tmp_path / "p.jsonl",
        [
            {"id": 1, "tool_calls": [], "response": "The automobile is quick."},
            {"id": 2, "tool_calls": [], "response": "Rainy in Oslo."},
        ],
    )
    references = write(
        tmp_path / "r.jsonl",
        [
            {"id": 1, "expected_tool_calls": [], "expected_response": "The car is fast."},
            {"id": 2, "expected_tool_calls": [], "expected_response": "Rainy in Oslo."},
        ],
    )
    return predictions, references


def summary_of(tmp_path, *extra):
    predictions, references = files(tmp_path)
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        app(), ["score", str(predictions), "--references", str(references), "-o", str(out), *extra]
    )
    assert result.exit_code == 0, result.output
    return result, [json.loads(line) for line in out.read_text().splitlines()]


@NEEDS_WORDNET
def test_score_rows_and_summary_have_meteor_with_synonyms(tmp_path):
    result, rows = summary_of(tmp_path, "--json-summary")
    summary = json.loads(result.stdout)
    assert [row["response_meteor"] for row in rows] == [
        meteor("The automobile is quick.", "The car is fast."),
        meteor("Rainy in Oslo.", "Rainy in Oslo."),
    ]
    assert summary["meteor_synonyms"] is True
    assert summary["metrics"]["response_meteor"]["n"] == 2


def test_score_says_when_synonyms_were_off(tmp_path, no_wordnet):
    result, rows = summary_of(tmp_path, "--json-summary")
    assert json.loads(result.stdout)["meteor_synonyms"] is False
    assert rows[0]["response_meteor"] == meteor("The automobile is quick.", "The car is fast.", synonyms=False)
    table, _ = summary_of(tmp_path)
    assert "WordNet synonyms off" in table.stdout and "wordnet-base" in table.stdout


def test_meteor_synonyms_is_null_without_answers_to_compare(tmp_path):
    predictions = write(tmp_path / "p.jsonl", [{"id": 1, "tool_calls": []}])
    references = write(tmp_path / "r.jsonl", [{"id": 1, "expected_tool_calls": []}])
    result = CliRunner().invoke(
        app(),
        [
            "score",
            str(predictions),
            "--references",
            str(references),
            "-o",
            str(tmp_path / "rows.jsonl"),
            "--json-summary",
        ],
    )
    assert json.loads(result.stdout)["meteor_synonyms"] is None


def test_score_stops_with_a_clear_error_on_a_wordnet_path_without_wordnet(tmp_path, monkeypatch):
    predictions, references = files(tmp_path)
    monkeypatch.setenv("REFLECTION_WORDNET", str(tmp_path))
    result = CliRunner().invoke(app(), ["score", str(predictions), "--references", str(references)])
    assert result.exit_code == 2
    assert "is not a WordNet database directory" in result.stderr


def test_score_files_passes_the_wordnet_path_on(tmp_path, no_wordnet):
    predictions, references = files(tmp_path)
    with pytest.raises(ValueError, match="not a WordNet database"):
        list(score_files(predictions, references, wordnet=tmp_path))


def test_meteor_never_reaches_for_the_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("METEOR tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(nltk, "download", refuse)
    response._wordnet_reader.cache_clear()  # load WordNet again, under the guard
    assert 0.0 < meteor("the automobile is quick", "the car is fast") <= 1.0
    assert 0.0 < meteor("the automobile is quick", "the car is fast", synonyms=False) <= 1.0
