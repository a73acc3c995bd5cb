"""The memory pages: each user's memories, why they come back (their nearest neighbours, and the
runs that recalled them, from the run event log), and forgetting them, which is recorded."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.selectors import recalls_of
from console.widgets import (
    AuditAdmin,
    MalformedFiltersSaid,
    UserFilter,
    change_url,
    filter_link,
    link,
    run_link,
    user_link,
)
from core.text import excerpt
from memory.forgetting import forget
from memory.models import ForgottenMemory, Memory
from memory.store import NearMemory, nearest
from workspace.requests import person_of

NEIGHBOURS = 5
# How much of a memory's text a list or a table row shows.
TEXT_WIDTH = 80
# A forgetting record keeps the text only for LOOP_FORGOTTEN_TEXT_DAYS (memory/forgetting.py).
NOT_KEPT_SAID = "(not kept: see LOOP_FORGOTTEN_TEXT_DAYS)"


def neighbours(memory: Memory, k: int = NEIGHBOURS) -> list[tuple[NearMemory, float]]:
    """The owner's `k` memories nearest to this one, with their cosine similarity."""
    vector = Memory.objects.values_list("embedding", flat=True).get(pk=memory.pk)
    found = nearest(memory.owner_id, vector, k + 1, strict=True)
    return [(near, 1.0 - near.distance) for near in found if near.pk != memory.pk][:k]


def table(headers: tuple[str, ...], rows: list[tuple[Any, ...]], empty: str) -> SafeString:
    if not rows:
        return format_html('<span class="loop-none">{}</span>', empty)
    return format_html(
        '<table class="loop-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        format_html_join("", "<th>{}</th>", ((header,) for header in headers)),
        format_html_join(
            "",
            "<tr>{}</tr>",
            ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
        ),
    )


def score_parts(parts: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in parts.items())


class OwnerFilter(UserFilter):
    title = "owner (click a name in the list)"
    path = "owner"


class MemoryAdmin(MalformedFiltersSaid):
    list_display = (
        "id",
        "owner_name",
        "short_text",
        "origin",
        "importance",
        "recall_count",
        "last_recalled_at",
        "source",
        "created_at",
    )
    list_display_links = ("id", "short_text")
    list_select_related = ("owner",)
    list_filter = ("origin", OwnerFilter)
    date_hierarchy = "created_at"
    search_fields = ("text",)
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50
    fields = (
        "owner_page",
        "text",
        ("origin", "importance"),
        ("recall_count", "last_recalled_at"),
        "source",
        ("created_at", "updated_at"),
        "nearest_neighbours",
        "recalled_by",
    )
    readonly_fields = ("owner_page", "source", "nearest_neighbours", "recalled_by")
    delete_confirmation_template = "admin/memory/memory/delete_confirmation.html"
    delete_selected_confirmation_template = "admin/memory/memory/delete_selected_confirmation.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Memory]:
        # The vector is for the index, not for reading: a list of 50 would carry 50 x 384 numbers.
        return super().get_queryset(request).defer("embedding")

    def has_add_permission(self, request: HttpRequest, obj: Memory | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Memory | None = None) -> bool:
        return False  # a memory's text and its vector go together; the store writes both

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        deleting = actions.get("delete_selected")
        if deleting is not None:
            action, name, _ = deleting
            actions["delete_selected"] = (action, name, "Forget selected memories (recorded)")
        return actions

    def delete_model(self, request: HttpRequest, obj: Memory) -> None:
        forget(Memory.objects.filter(pk=obj.pk), person_of(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
        forget(queryset, person_of(request))

    @admin.display(description="text")
    def short_text(self, memory: Memory) -> str:
        return excerpt(memory.text, TEXT_WIDTH)

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, memory: Memory) -> SafeString:
        return filter_link(self, memory.owner)

    @admin.display(description="owner")
    def owner_page(self, memory: Memory) -> SafeString:
        return user_link(memory.owner)

    @admin.display(description="stored by", ordering="source_run_id")
    def source(self, memory: Memory) -> SafeString:
        return run_link(memory.source_run_id)

    @admin.display(description="nearest neighbours (same owner)")
    def nearest_neighbours(self, memory: Memory) -> SafeString:
        rows = [
            (
                link(change_url(near), f"memory {near.pk}"),
                f"{similarity:.3f}",
                excerpt(near.text, TEXT_WIDTH),
            )
            for near, similarity in neighbours(memory)
        ]
        return table(("memory", "cosine similarity", "text"), rows, "No other memories.")

    @admin.display(description="recalled by")
    def recalled_by(self, memory: Memory) -> SafeString:
        rows = [
            (
                run_link(recall.run.pk),
                recall.run.created_at,
                f"{recall.recalled.score:.3f}",
                score_parts(recall.recalled.parts),
            )
            for recall in recalls_of(memory)
        ]
        return table(("run", "when", "score", "parts"), rows, "No run has recalled it.")


class ForgottenMemoryAdmin(AuditAdmin):
    list_display = (
        "id",
        "memory_id",
        "owner_name",
        "short_text",
        "origin",
        "source",
        "forgotten_by_name",
        "forgotten_at",
    )
    list_filter = ("origin",)
    date_hierarchy = "forgotten_at"
    search_fields = ("text", "owner_name", "forgotten_by_name")
    ordering = ("-id",)
    fields = (
        ("memory_id", "origin"),
        ("owner_name", "owner_page"),
        "kept_text",
        "source",
        ("forgotten_by_name", "forgotten_by_page", "forgotten_at"),
    )
    readonly_fields = ("owner_page", "forgotten_by_page", "source", "kept_text")

    @admin.display(description="text")
    def short_text(self, forgotten: ForgottenMemory) -> str:
        return excerpt(forgotten.text, TEXT_WIDTH) if forgotten.text else NOT_KEPT_SAID

    @admin.display(description="text")
    def kept_text(self, forgotten: ForgottenMemory) -> str:
        return forgotten.text or NOT_KEPT_SAID

    @admin.display(description="stored by", ordering="source_run_id")
    def source(self, forgotten: ForgottenMemory) -> SafeString:
        return run_link(forgotten.source_run_id)

    @admin.display(description="owner's account")
    def owner_page(self, forgotten: ForgottenMemory) -> SafeString:
        return user_link(forgotten.owner)

    @admin.display(description="operator's account")
    def forgotten_by_page(self, forgotten: ForgottenMemory) -> SafeString:
        return user_link(forgotten.forgotten_by)
