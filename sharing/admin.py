"""Shared links in the operators' console: every person's links, read-only (a link is made by its
sharer, from the chat), with Revoke as the one change, on the list and on a link's page; and the
audit of each look, read-only. The copy a link shows is not drawn here: its runs are the
console's own pages. The token is never shown: only its digest is kept."""

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from console.widgets import (
    AuditAdmin,
    MalformedFiltersSaid,
    UserFilter,
    badge,
    change_url,
    filter_link,
    link,
    list_url,
    user_link,
)
from sharing import links
from sharing.models import LinkView, SharedLink
from workspace.requests import person_of


class RevokedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("live", "live"), ("revoked", "revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "live":
            return queryset.filter(revoked_at__isnull=True)
        return queryset


class SharerFilter(UserFilter):
    title = "sharer (click a name in the list)"
    path = "sharer"


def state_badge(shared: SharedLink) -> SafeString:
    if shared.revoked_at is not None:
        return badge("revoked", tone="quiet", symbol="■")
    return badge("live", tone="good", symbol="●")


class SharedLinkAdmin(MalformedFiltersSaid):
    list_display = (
        "title_shown",
        "sharer_name",
        "conversation_shown",
        "audience_shown",
        "include_files",
        "created_at",
        "views_shown",
        "state_shown",
    )
    list_select_related = ("sharer", "group")
    list_filter = (RevokedFilter, SharerFilter, "audience")
    search_fields = ("sharer__username", "conversation__title")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    actions = ("revoke_links",)
    change_form_template = "admin/sharing/sharedlink/change_form.html"
    fields = (
        ("title_shown", "sharer_page"),
        ("conversation_shown", "audience_shown", "include_files"),
        ("created_at", "views_shown"),
        ("state_shown", "revoked_at", "revoked_by_page"),
    )
    readonly_fields = (
        "title_shown",
        "sharer_page",
        "conversation_shown",
        "audience_shown",
        "include_files",
        "created_at",
        "views_shown",
        "state_shown",
        "revoked_at",
        "revoked_by_page",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[SharedLink]:
        shared: QuerySet[SharedLink] = super().get_queryset(request)
        return shared.annotate(view_count=Count("views"))

    @admin.display(description="conversation shared")
    def title_shown(self, shared: SharedLink) -> str:
        return shared.title

    @admin.display(description="sharer", ordering="sharer__username")
    def sharer_name(self, shared: SharedLink) -> SafeString:
        return filter_link(self, shared.sharer)

    @admin.display(description="sharer")
    def sharer_page(self, shared: SharedLink) -> SafeString:
        return user_link(shared.sharer)

    @admin.display(description="conversation")
    def conversation_shown(self, shared: SharedLink) -> SafeString:
        return format_html("conversation {}", shared.conversation_id)

    @admin.display(description="audience", ordering="audience")
    def audience_shown(self, shared: SharedLink) -> str:
        if shared.group is not None:
            return f"group {shared.group.name}"
        return "no one (group deleted)" if shared.audience == "group" else "everyone signed in"

    @admin.display(description="views", ordering="view_count")
    def views_shown(self, shared: SharedLink) -> SafeString:
        count = getattr(shared, "view_count", 0)
        return link(list_url(LinkView, link__id__exact=shared.pk), count)

    @admin.display(description="state")
    def state_shown(self, shared: SharedLink) -> SafeString:
        return state_badge(shared)

    @admin.display(description="revoked by")
    def revoked_by_page(self, shared: SharedLink) -> SafeString:
        return user_link(shared.revoked_by)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # revoked, never deleted: its looks stay audited

    def has_revoke_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        """Revoking is a change of the link, what staff are given to manage links."""
        return request.user.has_perm("sharing.change_sharedlink")

    @admin.action(description="Revoke selected links", permissions=["revoke"])
    def revoke_links(self, request: HttpRequest, queryset: QuerySet[SharedLink]) -> None:
        live = list(queryset.filter(revoked_at__isnull=True))
        for shared in live:
            self.revoke(request, shared)
        already = queryset.count() - len(live)
        message = f"Revoked {len(live)} link{'s' if len(live) != 1 else ''}."
        if already:
            message += f" {already} had been revoked already and stay as they were."
        self.message_user(request, message, messages.SUCCESS if live else messages.WARNING)

    def revoke(self, request: HttpRequest, shared: SharedLink) -> SharedLink:
        shared = links.revoke(SharedLink.objects.all(), shared.pk, by=person_of(request))
        self.log_change(request, shared, "Revoked by an operator.")
        return shared

    def revoke_view(self, request: HttpRequest, link_id: int) -> HttpResponse:
        if not self.has_revoke_permission(request):
            raise PermissionDenied
        shared = get_object_or_404(SharedLink, pk=link_id)
        if shared.revoked_at is not None:
            self.message_user(request, "That link had been revoked already.", messages.WARNING)
        else:
            self.revoke(request, shared)
            self.message_user(request, "Revoked the link: it is refused from now on.")
        return HttpResponseRedirect(reverse("admin:sharing_sharedlink_change", args=[link_id]))

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: SharedLink | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["can_revoke"] = obj.revoked_at is None and self.has_revoke_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:link_id>/revoke/",
                view(require_POST(self.revoke_view)),
                name="sharing_sharedlink_revoke",
            ),
            *super().get_urls(),
        ]


class ViewerFilter(UserFilter):
    title = "viewer (click a name in the list)"
    path = "viewer"


class LinkViewAdmin(AuditAdmin):
    list_display = ("viewed_at", "viewer_name", "link_shown", "file")
    list_select_related = ("viewer", "link")
    list_filter = (ViewerFilter,)
    date_hierarchy = "viewed_at"
    ordering = ("-viewed_at",)
    fields = ("viewed_at", "viewer_page", "link_shown", "file")
    readonly_fields = fields

    @admin.display(description="viewer", ordering="viewer__username")
    def viewer_name(self, view: LinkView) -> SafeString:
        if view.viewer is None:
            return format_html('<span class="loop-none">{}</span>', "a deleted account")
        return filter_link(self, view.viewer)

    @admin.display(description="viewer")
    def viewer_page(self, view: LinkView) -> SafeString:
        return user_link(view.viewer)

    @admin.display(description="link")
    def link_shown(self, view: LinkView) -> SafeString:
        return link(change_url(view.link), view.link.title)


admin.site.register(SharedLink, SharedLinkAdmin)
admin.site.register(LinkView, LinkViewAdmin)
