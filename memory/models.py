"""A user's long-term memories: text, its embedding, and what makes it worth keeping."""

from django.conf import settings
from django.db import models
from pgvector.django import HalfVectorField, HnswIndex

# The migration creates the column with this many dimensions; `manage.py reembed` changes it
# when the configured embedder makes vectors of another size.
DEFAULT_DIMENSIONS = 384


class Origin(models.TextChoices):
    RUN = "run", "Outcome of a run"
    TOLD = "told", "Remembered on purpose"


class Memory(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories"
    )
    text = models.TextField()
    # Half precision: plenty for cosine ranking, and half the size, so the HNSW index of a large
    # store stays in PostgreSQL's shared buffers.
    embedding = HalfVectorField(dimensions=DEFAULT_DIMENSIONS)
    content_hash = models.CharField(max_length=64)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.RUN)
    # The run that stored it, by id: memory knows nothing of runs (the layer above it).
    source_run_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    importance = models.FloatField(default=0.5)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_recalled_at = models.DateTimeField(null=True, blank=True)
    recall_count = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name_plural = "memories"
        ordering = ("-updated_at",)
        constraints = (
            models.UniqueConstraint(fields=["owner", "content_hash"], name="memory_unique_text"),
        )
        indexes = (
            HnswIndex(
                name="memory_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["halfvec_cosine_ops"],
            ),
        )

    def __str__(self) -> str:
        return self.text[:80]


class EmbeddingSpace(models.Model):
    """Which embedder made the stored vectors (one row): vectors of two embedders do not compare,
    even when they have the same dimension."""

    embedder = models.CharField(max_length=200)

    def __str__(self) -> str:
        return self.embedder


class ForgottenMemory(models.Model):
    """A memory was forgotten, by an operator or its owner: who, when, which. Its text is kept only
    for LOOP_FORGOTTEN_TEXT_DAYS (memory/forgetting.py). The memory itself is gone; this row
    stays, and keeps names as text so it outlives the accounts it mentions."""

    memory_id = models.PositiveBigIntegerField()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    owner_name = models.CharField(max_length=150)
    text = models.TextField()
    origin = models.CharField(max_length=8, choices=Origin.choices)
    source_run_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    forgotten_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    forgotten_by_name = models.CharField(max_length=150)
    forgotten_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "forgotten memories"
        ordering = ("-forgotten_at", "-pk")

    def __str__(self) -> str:
        return (
            f"Memory {self.memory_id} of {self.owner_name}, forgotten by {self.forgotten_by_name}"
        )
