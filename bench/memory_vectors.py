"""Are bench/memory.py's made vectors a fair stand-in for MiniLM's? Their neighbours compared.

    nice -n 19 .venv/bin/python bench/memory_vectors.py [--real 40000]
        [--sizes 3000,10000,30000,40000,100000,1000000] [--bases 3000,25000] [--queries 100]

For each size, the bench's questions (real MiniLM embeddings of questions reworded from stored
texts) against (a) that many real MiniLM embeddings of the bench's synthetic texts, where --real
has them (embedded once, kept in var/bench/), and (b) the bench's made vectors around each
--bases count of real ones (bench/memory.py's `dataset`). Per question: the cosine distance to
its 1st, 10th and 100th nearest, and the local intrinsic dimensionality of its 20 nearest (LID,
the maximum-likelihood estimate of Levina and Bickel), the usual measure of how hard a query is
for a graph index: the higher, the more of the nearest lie at nearly the same distance. Medians
over the questions. Then how close the 10th and 11th nearest are (d11-d10, the median, and the
share of questions where they lie within bench/memory.py's TIE, which its recall@10 counts as
found either way): near-ties no index could order. Exact (numpy), no database.
"""

import argparse
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory import NOISE, TIE, dataset, embedded, query_like, stored_texts
from memory.embedders import get_embedder

NEIGHBOURS = 100
LID_K = 20


def profile(name: str, vectors: "np.ndarray", questions: "np.ndarray") -> None:
    nearest = np.partition(1 - questions @ vectors.T, NEIGHBOURS, axis=1)[:, :NEIGHBOURS]
    nearest.sort(axis=1)
    euclidean = np.sqrt(np.maximum(2 * nearest, 1e-12))
    lid = -1 / np.mean(np.log(euclidean[:, : LID_K - 1] / euclidean[:, LID_K - 1 : LID_K]), 1)
    d1, d10, d100 = (np.median(nearest[:, i]) for i in (0, 9, 99))
    gap = nearest[:, 10] - nearest[:, 9]
    print(
        f"  {name:<28} {len(vectors):>9,}   d1 {d1:.3f}   d10 {d10:.3f}   d100 {d100:.3f}"
        f"   d100-d10 {d100 - d10:.3f}   LID {np.median(lid):5.1f}"
        f"   d11-d10 {np.median(gap):.4f} ({np.mean(gap <= TIE):.0%} tied)",
        flush=True,
    )


def questions_for(texts: list[str], count: int, seed: int) -> "np.ndarray":
    rng = random.Random(seed)
    asked = [query_like(rng, texts[rng.randrange(len(texts))]) for _ in range(count)]
    return np.array(get_embedder().embed(asked), dtype=np.float32)


def whole_numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", type=int, default=40_000)
    parser.add_argument("--sizes", type=whole_numbers, default=[3000, 10000, 30000, 40000, 10**6])
    parser.add_argument("--bases", type=whole_numbers, default=[3000, 25000])
    parser.add_argument("--queries", type=int, default=100)
    options = parser.parse_args()
    texts = stored_texts(options.real)
    real = embedded(get_embedder(), texts)
    print(
        f"cosine distances from {options.queries} questions to their nearest (medians);"
        f" noise {NOISE}"
    )
    for size in options.sizes:
        if size <= len(real):
            profile("MiniLM", real[:size], questions_for(texts[:size], options.queries, size))
        for base in options.bases:
            if base >= size:
                continue
            data = dataset(size, base)
            profile(
                f"made around {base:,}",
                data.vectors,
                questions_for(data.texts, options.queries, size),
            )


if __name__ == "__main__":
    main()
