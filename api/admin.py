"""The API keys in the operators' console: every person's keys, read-only (a key is made by its
person on their settings page, or by `manage.py apikey create`), with Revoke as the one change,
on the list and on a key's page. The digest is never shown: it is not secret enough to matter,
but there is nothing an operator does with it."""

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from api.keys import revoke
from api.models import ApiKey
from console.widgets import MalformedFiltersSaid, UserFilter, badge, filter_link, user_link
from workspace.requests import person_of

STATES = {
    "active": ("good", "●"),
    "expired": ("warn", "⧗"),
    "revoked": ("quiet", "■"),
}


class StateFilter(admin.SimpleListFilter):
    """Active, expired or revoked, as the key's page says it (ApiKey.state)."""

    title = "state"
    parameter_name = "state"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [(state, state) for state in STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "active":
            live = queryset.filter(revoked_at__isnull=True)
            return live.exclude(expires_at__lte=now)
        return queryset


class OwnerFilter(UserFilter):
    path = "owner"


def state_badge(key: ApiKey) -> SafeString:
    tone, symbol = STATES[key.state]
    return badge(key.state, tone=tone, symbol=symbol)


class ApiKeyAdmin(MalformedFiltersSaid):
    list_display = (
        "prefix_shown",
        "name",
        "owner_name",
        "scopes_shown",
        "created_at",
        "expires_at",
        "last_used",
        "state_shown",
    )
    list_select_related = ("owner",)
    list_filter = (StateFilter, OwnerFilter)
    search_fields = ("prefix", "name", "owner__username", "owner__email")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    actions = ("revoke_keys",)
    change_form_template = "admin/api/apikey/change_form.html"
    fields = (
        ("prefix_shown", "name"),
        ("owner_page", "scopes_shown"),
        ("created_at", "expires_at"),
        "last_used",
        ("state_shown", "revoked_at", "revoked_by_page"),
    )
    readonly_fields = (
        "prefix_shown",
        "name",
        "owner_page",
        "scopes_shown",
        "created_at",
        "expires_at",
        "last_used",
        "state_shown",
        "revoked_at",
        "revoked_by_page",
    )

    @admin.display(description="prefix", ordering="prefix")
    def prefix_shown(self, key: ApiKey) -> SafeString:
        return format_html("<code>{}…</code>", key.prefix)

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, key: ApiKey) -> SafeString:
        return filter_link(self, key.owner)

    @admin.display(description="owner")
    def owner_page(self, key: ApiKey) -> SafeString:
        return user_link(key.owner)

    @admin.display(description="scopes")
    def scopes_shown(self, key: ApiKey) -> SafeString:
        return format_html_join(", ", "<code>{}</code>", ((scope,) for scope in key.scopes))

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, key: ApiKey) -> SafeString:
        if key.last_used_at is None:
            return format_html('<span class="loop-none">{}</span>', "never")
        when = timezone.localtime(key.last_used_at).strftime("%Y-%m-%d %H:%M")
        return format_html("{} from {}", when, key.last_used_from or "an unknown address")

    @admin.display(description="state")
    def state_shown(self, key: ApiKey) -> SafeString:
        return state_badge(key)

    @admin.display(description="revoked by")
    def revoked_by_page(self, key: ApiKey) -> SafeString:
        return user_link(key.revoked_by)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # revoked, never deleted: the runs and decisions name the key

    def has_revoke_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        """Revoking is a change of the key (api.change_apikey), what staff are given to manage
        keys; a superuser has it."""
        return request.user.has_perm("api.change_apikey")

    @admin.action(description="Revoke selected keys", permissions=["revoke"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        live = list(queryset.filter(revoked_at__isnull=True))
        for key in live:
            self.revoke(request, key)
        already = queryset.count() - len(live)
        message = f"Revoked {len(live)} key{'s' if len(live) != 1 else ''}."
        if already:
            message += f" {already} had been revoked already and stay as they were."
        self.message_user(request, message, messages.SUCCESS if live else messages.WARNING)

    def revoke(self, request: HttpRequest, key: ApiKey) -> ApiKey:
        key = revoke(ApiKey.objects.all(), key.prefix, by=person_of(request))
        self.log_change(request, key, "Revoked by an operator.")
        return key

    def revoke_view(self, request: HttpRequest, key_id: int) -> HttpResponse:
        if not self.has_revoke_permission(request):
            raise PermissionDenied
        key = get_object_or_404(ApiKey, pk=key_id)
        if key.revoked_at is not None:
            self.message_user(request, f"{key.label} had been revoked already.", messages.WARNING)
        else:
            key = self.revoke(request, key)
            self.message_user(request, f"Revoked {key.label}: it is refused from now on.")
        return HttpResponseRedirect(reverse("admin:api_apikey_change", args=[key.pk]))

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: ApiKey | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["can_revoke"] = obj.revoked_at is None and self.has_revoke_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:key_id>/revoke/",
                view(require_POST(self.revoke_view)),
                name="api_apikey_revoke",
            ),
            *super().get_urls(),
        ]


admin.site.register(ApiKey, ApiKeyAdmin)
