"""`manage.py reembed`: re-embed every memory after changing LOOP_EMBEDDER (or its dimension)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory.embedders import get_embedder
from memory.models import Memory
from memory.store import reembed, stored_dimensions, stored_embedder


class Command(BaseCommand):
    help = (
        "Re-embed every memory with the configured embedder (LOOP_EMBEDDER). If it makes vectors "
        "of another dimension than the stored ones, the column and its index are rebuilt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=256)
        parser.add_argument(
            "--if-stale",
            action="store_true",
            help="Only when the store was made by another embedder (`make run` uses this).",
        )
        parser.add_argument(
            "--max-memories",
            type=int,
            help="With --if-stale: leave a larger store alone, saying how to move it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = get_embedder()
        made_by, count = stored_embedder(), Memory.objects.count()
        if options["if_stale"]:
            if made_by in ("", embedder.name) or count == 0:
                return
            limit = options["max_memories"]
            if limit is not None and count > limit:
                self.stderr.write(
                    f"The memory store's {count:,} memories were embedded by {made_by}, but "
                    f"LOOP_EMBEDDER is {embedder.name}: remembering and recalling fail until "
                    "you run `manage.py reembed` (it locks the memory table while it works)."
                )
                return
            self.stdout.write(
                f"The memory store was embedded by {made_by}; re-embedding its {count:,} "
                f"memories with {embedder.name} (LOOP_EMBEDDER)..."
            )
        before = stored_dimensions()
        moved = reembed(options["batch_size"])
        resized = f" (the store went from {before} to {embedder.dimensions} dimensions)"
        self.stdout.write(
            f"Re-embedded {moved} memories with {embedder.name}, {embedder.dimensions} "
            f"dimensions{resized if before != embedder.dimensions else ''}."
        )
