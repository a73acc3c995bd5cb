"""`manage.py reembed`: re-embed every memory after changing LOOP_EMBEDDER (or its dimension)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory.embedders import get_embedder
from memory.store import reembed, stored_dimensions


class Command(BaseCommand):
    help = (
        "Re-embed every memory with the configured embedder (LOOP_EMBEDDER). If it makes vectors "
        "of another dimension than the stored ones, the column and its index are rebuilt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=256)

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = get_embedder()
        before = stored_dimensions()
        count = reembed(options["batch_size"])
        resized = f" (the store went from {before} to {embedder.dimensions} dimensions)"
        self.stdout.write(
            f"Re-embedded {count} memories with {embedder.name}, {embedder.dimensions} "
            f"dimensions{resized if before != embedder.dimensions else ''}."
        )
