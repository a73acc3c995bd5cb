"""The console's quotas: operators add quotas per group and per person (accounting.models.Quota);
the site's own (LOOP_QUOTA) are shown above the list, read-only. Every one that applies to a
person is checked (accounting/quotas.py)."""

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from accounting.models import Quota
from accounting.quotas import site_limits


class QuotaAdmin(admin.ModelAdmin[Quota]):
    list_display = ("__str__", "group", "user", "measure", "limit", "currency", "period", "window")
    list_filter = ("measure", "period", "window", "group")
    search_fields = ("user__username", "group__name")
    autocomplete_fields = ("user",)
    fields = ("group", "user", "measure", "limit", "currency", "period", "window")
    change_list_template = "admin/accounting/quota/change_list.html"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "site_quotas": site_limits(settings.LOOP_QUOTA),
            "time_zone": settings.TIME_ZONE,
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)
