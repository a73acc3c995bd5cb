"""The notifications' pages: webhook endpoints (the site's, which operators set here, and
people's, shown for the audit), and the delivery log, every attempt with what the endpoint
answered. A secret is shown once, on the page that answers its making or renewal."""

from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from console.widgets import AuditAdmin, badge, user_link
from notifications.models import Attempt, Delivery, Endpoint, EventType, new_secret
from notifications.webhooks import send_test

SECRET_PAGE = "admin/notifications/secret.html"  # noqa: S105 (a template)
STATE_BADGES = {
    Delivery.State.DELIVERED: ("good", "✓"),
    Delivery.State.PENDING: ("warn", "↻"),
    Delivery.State.FAILED: ("bad", "✗"),
}


class EndpointForm(forms.ModelForm[Endpoint]):
    url = forms.URLField(
        max_length=2000,
        label="URL",
        assume_scheme="https",
        help_text="A site endpoint is trusted: it may be on a private network (never a cloud's "
        "metadata address). People's endpoints are held to public addresses.",
    )
    events = forms.MultipleChoiceField(
        choices=[choice for choice in EventType.choices if choice[0] != EventType.TEST],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None checked: every event.",
    )

    class Meta:
        model = Endpoint
        fields = ("url", "events", "description", "active")


def secrets_page(request: HttpRequest, endpoints: Sequence[Endpoint]) -> TemplateResponse:
    context = {**admin.site.each_context(request), "endpoints": endpoints, "title": "Secrets"}
    return TemplateResponse(request, SECRET_PAGE, context)


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin[Endpoint]):
    form = EndpointForm
    list_display = ("url", "owner_name", "event_list", "active", "created_at")
    list_filter = ("active",)
    list_select_related = ("owner",)
    search_fields = ("url", "description")
    actions = ("test", "renew_secret")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Endpoint]:
        return super().get_queryset(request).select_related("owner")

    @admin.display(description="whose")
    def owner_name(self, endpoint: Endpoint) -> Any:
        return user_link(endpoint.owner) if endpoint.owner else "the site"

    @admin.display(description="events")
    def event_list(self, endpoint: Endpoint) -> str:
        return ", ".join(endpoint.events) or "every event"

    def response_add(
        self, request: HttpRequest, obj: Endpoint, post_url_continue: str | None = None
    ) -> HttpResponse:
        return secrets_page(request, [obj])

    @admin.action(description="Send a test")
    def test(self, request: HttpRequest, endpoints: QuerySet[Endpoint]) -> None:
        for endpoint in endpoints:
            send_test(endpoint)
        messages.success(request, "Tests queued: their deliveries show in the delivery log.")

    @admin.action(description="New secret (the old one stops at once)")
    def renew_secret(self, request: HttpRequest, endpoints: QuerySet[Endpoint]) -> HttpResponse:
        renewed = list(endpoints)
        for endpoint in renewed:
            endpoint.secret = new_secret()
            endpoint.save(update_fields=["secret"])
        return secrets_page(request, renewed)


class AttemptInline(admin.TabularInline[Attempt, Delivery]):
    model = Attempt
    fields = ("number", "at", "status_code", "error", "duration")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(AuditAdmin):
    list_display = ("created_at", "event_type", "endpoint", "run_id", "state_badge", "tries")
    list_filter = ("state", "event_type")
    search_fields = ("webhook_id", "endpoint__url")
    readonly_fields = ("endpoint", "webhook_id", "event_type", "run_id", "state", "body")
    fields = readonly_fields
    inlines = (AttemptInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).select_related("endpoint")

    @admin.display(description="state", ordering="state")
    def state_badge(self, delivery: Delivery) -> Any:
        tone, symbol = STATE_BADGES[Delivery.State(delivery.state)]
        return badge(delivery.state, tone=tone, symbol=symbol)

    @admin.display(description="attempts")
    def tries(self, delivery: Delivery) -> int:
        return delivery.attempts.count()
