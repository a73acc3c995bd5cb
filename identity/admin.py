"""The console's page of provider identities: who signs in through the provider, when they last
did, when the re-check last asked about them and whether the provider stopped admitting them.
An operator links an existing account to a person at the provider by adding an identity (the
person's `sub` there); nothing else here is edited by hand. "Re-check now" asks the provider at
once about the selected people."""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from identity.deprovisioning import Outcome, recheck
from identity.models import ProviderIdentity
from identity.passwords import RuledAdminAuthenticationForm

# The console's login says why LOOP_PASSWORD_LOGIN refused a right password.
admin.site.login_form = RuledAdminAuthenticationForm


class LinkForm(forms.ModelForm[ProviderIdentity]):
    class Meta:
        model = ProviderIdentity
        fields = ("user", "issuer", "subject")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["issuer"].initial = settings.LOOP_OIDC_ISSUER
        self.fields["user"].help_text = "The existing account the person signs in to."


@admin.register(ProviderIdentity)
class ProviderIdentityAdmin(admin.ModelAdmin[ProviderIdentity]):
    form = LinkForm
    list_display = ("user", "subject", "last_sign_in_at", "checked_at", "removed_at")
    list_filter = ("removed_at",)
    search_fields = ("user__username", "subject")
    autocomplete_fields = ("user",)
    actions = ("recheck_now",)
    DONE = (
        "user",
        "issuer",
        "subject",
        "created_at",
        "last_sign_in_at",
        "checked_at",
        "removed_at",
        "made_staff",
    )

    def get_readonly_fields(self, request: HttpRequest, obj: ProviderIdentity | None = None) -> Any:
        return self.DONE if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: ProviderIdentity | None = None) -> Any:
        return self.DONE if obj is not None else ("user", "issuer", "subject")

    @admin.action(description="Re-check now: ask the provider about them")
    def recheck_now(self, request: HttpRequest, queryset: QuerySet[ProviderIdentity]) -> None:
        counts = dict.fromkeys(Outcome, 0)
        for identity in queryset.select_related("user"):
            counts[recheck(identity)] += 1
        summary = ", ".join(f"{n} {outcome.value}" for outcome, n in counts.items() if n)
        level = messages.WARNING if counts[Outcome.REMOVED] else messages.INFO
        self.message_user(request, f"Re-checked: {summary or 'nobody'}.", level)
