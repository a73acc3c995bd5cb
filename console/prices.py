"""The console's prices and costs: the price table (accounting.Price, with LOOP_PRICES's entries
shown beside it), the ledger read-only for auditors, and the cost report per person, group,
model and day, with its CSV export.

A price in effect is never edited or deleted: turns were charged at it, and the table says what
they were charged. A change of price is a new row with a later `effective_from`.
"""

import csv
from datetime import date, timedelta
from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.safestring import SafeString

from accounting import reports
from accounting.models import Charge, Price, after_notice
from accounting.prices import configured_rates
from console.selectors import day_bounds
from console.widgets import AuditAdmin, run_link

# How far in the past a new price may start: the few minutes the form was open, no more (an
# earlier start would say turns already charged had another price).
PAST_SLACK = timedelta(minutes=10)
REPORT_DEFAULT_DAYS = 30
EARLIEST = date(1970, 1, 2)


class PriceForm(forms.ModelForm[Price]):
    class Meta:
        model = Price
        fields = ("model", "input", "output", "cached_input", "currency", "effective_from")
        help_texts: ClassVar[dict[str, str]] = {
            "effective_from": (
                "From when turns are charged at this price (a minute from now at the earliest, "
                "so that every worker has read it by then; or later). A price in effect "
                "is never edited: to change it, add a new price for the model with a later "
                "start. Turns already recorded keep the price they were charged at."
            ),
        }

    def clean_effective_from(self) -> Any:
        start = self.cleaned_data["effective_from"]
        now = timezone.now()
        if start < now - PAST_SLACK:
            raise forms.ValidationError(
                "A price cannot start in the past: turns already recorded keep their price."
            )
        # A new price starting "now" starts once every process has read it (Price.clean).
        return max(start, after_notice()) if self.instance.pk is None else start

    def clean_currency(self) -> str:
        code = str(self.cleaned_data["currency"]).strip().upper()
        if len(code) != 3 or not code.isalpha():
            raise forms.ValidationError('A currency code of three letters, like "USD".')
        return code


def in_effect(price: Price | None) -> bool:
    return price is not None and price.effective_from <= timezone.now()


class PriceAdmin(admin.ModelAdmin[Price]):
    form = PriceForm
    list_display = (
        "model",
        "input",
        "output",
        "cached_input",
        "currency",
        "effective_from",
        "state",
        "created_by",
    )
    list_filter = ("currency",)
    search_fields = ("model",)
    ordering = ("model", "-effective_from")
    change_list_template = "admin/accounting/price/change_list.html"

    @admin.display(description="")
    def state(self, price: Price) -> str:
        return "in effect or past" if in_effect(price) else "scheduled"

    def get_readonly_fields(self, request: HttpRequest, obj: Price | None = None) -> Any:
        if in_effect(obj):
            return (*PriceForm.Meta.fields, "created_by", "created_at")
        return ("created_by", "created_at")

    def has_change_permission(self, request: HttpRequest, obj: Price | None = None) -> bool:
        # A price in effect is shown (read-only fields), its form never saves.
        allowed = super().has_change_permission(request, obj)
        return allowed and not in_effect(obj)

    def has_delete_permission(self, request: HttpRequest, obj: Price | None = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and not in_effect(obj)

    def save_model(self, request: HttpRequest, obj: Price, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        configured = [rate for rates in configured_rates().values() for rate in rates]
        return super().changelist_view(
            request, (extra_context or {}) | {"configured_prices": configured}
        )


class ChargeAdmin(AuditAdmin):
    """The ledger, read-only: one row per model turn. Never deleted here, not even by a
    superuser: the site's totals must not change after the fact."""

    list_display = ("at", "who", "run_page", "step", "model", "tokens", "cost_shown", "currency")
    list_filter = ("currency", "kind")
    search_fields = ("model", "person", "user__username")
    date_hierarchy = "at"
    ordering = ("-at",)
    list_select_related = ("user",)
    change_list_template = "admin/accounting/charge/change_list.html"
    fields = (
        "kind",
        "at",
        "who",
        "run_page",
        "conversation_id",
        "step",
        "provider",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cost_shown",
        "currency",
        "price_id",
    )
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    @admin.display(description="person")
    def who(self, charge: Charge) -> str:
        return charge.user.get_username() if charge.user is not None else charge.person

    @admin.display(description="run", ordering="run_id")
    def run_page(self, charge: Charge) -> SafeString:
        return run_link(charge.run_id)

    @admin.display(description="tokens")
    def tokens(self, charge: Charge) -> int:
        return charge.total_tokens

    @admin.display(description="cost", ordering="cost")
    def cost_shown(self, charge: Charge) -> str:
        return reports.PRICE_UNKNOWN if charge.cost is None else reports.amount_text(charge.cost)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("report/", view(self.report_view), name="accounting_charge_report"),
            *super().get_urls(),
        ]

    def report_view(self, request: HttpRequest) -> HttpResponse:
        """Costs per person, group, model or day over a range, as a page or (`?format=csv`)
        the same rows as CSV."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = CostRange(request.GET or None)
        since, until, by, sort, descending = form.chosen()
        start, end = day_bounds(since, until)
        rows = reports.cost_report(by, start, end, sort, descending)
        if request.GET.get("format") == "csv":
            return csv_response(rows, by, since, until)
        query = request.GET.copy()
        query.pop("sort", None)
        query.pop("format", None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Costs",
            "opts": self.opts,
            "form": form,
            "since": since,
            "until": until,
            "by": by,
            "by_label": reports.DIMENSIONS[by][0],
            "rows": rows,
            "totals": reports.totals_between(start, end),
            "columns": sort_links(query.urlencode(), sort, descending, by),
            "csv_query": (query.urlencode() + "&" if query else "") + f"sort={'-' * descending}"
            f"{sort}&format=csv",
        }
        status = 400 if form.errors else 200
        return TemplateResponse(request, "admin/accounting/costs.html", context, status=status)


COLUMN_LABELS = {
    "currency": "currency",
    "turns": "turns",
    "prompt_tokens": "prompt tokens",
    "completion_tokens": "completion tokens",
    "cached_tokens": "cached tokens",
    "cost": "cost",
}


def sort_links(query: str, sort: str, descending: bool, by: str) -> list[dict[str, str | bool]]:
    """Each column's header: its label, and the link sorting by it (again: the other way)."""
    labels = {"key": reports.DIMENSIONS[by][0].lower(), **COLUMN_LABELS}
    prefix = f"?{query}&" if query else "?"
    return [
        {
            "name": name,
            "label": label,
            "url": f"{prefix}sort={'-' if name == sort and not descending else ''}{name}",
            "sorted": name == sort,
            "descending": descending,
        }
        for name, label in labels.items()
    ]


def csv_response(rows: list[reports.ReportRow], by: str, since: date, until: date) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    name = f"loop-costs-by-{by}-{since:%Y-%m-%d}-{until:%Y-%m-%d}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    writer = csv.writer(response)
    writer.writerow([by, *list(COLUMN_LABELS.values())])
    for row in rows:
        writer.writerow(row.cells())
    return response


class CostRange(forms.Form):
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    by = forms.ChoiceField(
        required=False,
        choices=[(name, label) for name, (label, _) in reports.DIMENSIONS.items()],
        label="Per",
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        since, until = self.cleaned_data.get("since"), self.cleaned_data.get("until")
        if since and until and since > until:
            raise forms.ValidationError("The range starts after it ends.")
        return self.cleaned_data

    def chosen(self) -> tuple[date, date, str, str, bool]:
        """The days, the dimension and the sort shown: the last 30 days per person, by
        person, unless the form chose valid ones."""
        today = timezone.localdate()
        since, until, by = today - timedelta(days=REPORT_DEFAULT_DAYS - 1), today, "person"
        asked = str(self.data.get("sort") or "key")
        descending, sort = asked.startswith("-"), asked.lstrip("-")
        if sort not in reports.COLUMNS:
            sort, descending = "key", False
        if not self.is_valid():
            return since, until, by, sort, descending
        data = self.cleaned_data
        # The calendar's edges (0001-01-01, 9999-12-31) cannot be turned into times; no turn
        # lies beyond these anyway.
        first, last = max(data["since"] or since, EARLIEST), min(data["until"] or until, today)
        return first, last, data["by"] or by, sort, descending
