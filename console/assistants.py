"""The console's assistants: site assistants (no owner) made and edited by staff, shared with
groups or everyone; people's own shown read-only; each one's version history read-only; archive
instead of delete (runs name its versions); a link to its runs, and the run list filtered by
assistant (`?assistant=<id>`, AssistantFilter on console/runs.py's list).

Every save is a new frozen version (assistants.versions.new_version) by the staff member who
saved it: the runs started before keep what they were started with."""

import json
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from agent.llm.factory import offered_models
from assistants.forms import tools_of
from assistants.models import Assistant, AssistantVersion
from assistants.versions import new_version, set_archived
from console.widgets import user_id
from rights.effective import EVERYTHING


class SiteAssistantForm(forms.ModelForm[Assistant]):
    """A site assistant: any model, tool or MCP server the site offers (each person's runs of it
    are still held to their own rights)."""

    model = forms.ChoiceField(required=False, help_text="Empty: the model picked in the chat.")
    tool_names = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, help_text="When not all tools."
    )
    ask_before = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = Assistant
        fields = (
            "name",
            "description",
            "instructions",
            "model",
            "all_tools",
            "tool_names",
            "all_mcp_servers",
            "mcp_servers",
            "ask_before",
            "use_memory",
            "everyone",
            "groups",
        )
        widgets: ClassVar[dict[str, Any]] = {"instructions": forms.Textarea(attrs={"rows": 6})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fields: dict[str, Any] = self.fields
        tools = [(name, name) for name in tools_of(EVERYTHING)]
        models = [(choice.name, choice.name) for choice in offered_models()]
        current = self.instance.model
        if current and current not in dict(models):  # no longer offered: kept, and said
            models.append((current, f"{current} (not offered now)"))
        fields["model"].choices = [("", "The model picked in the chat"), *models]
        fields["tool_names"].choices = tools
        fields["ask_before"].choices = tools


class VersionInline(admin.TabularInline[AssistantVersion, Assistant]):
    """Each save, as it stood: read-only (a run names its version)."""

    model = AssistantVersion
    extra = 0
    can_delete = False
    fields = ("number", "created_at", "created_by", "settings")
    readonly_fields = fields
    ordering = ("-number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="as saved")
    def settings(self, version: AssistantVersion) -> str:
        return format_html("<pre>{}</pre>", json.dumps(version.snapshot, indent=2))


class AssistantAdmin(admin.ModelAdmin[Assistant]):
    form = SiteAssistantForm
    list_display = ("name", "whose", "shared_with", "version", "archived", "runs")
    list_filter = (
        ("owner", admin.EmptyFieldListFilter),
        ("archived_at", admin.EmptyFieldListFilter),
    )
    search_fields = ("name", "description")
    filter_horizontal = ("groups", "mcp_servers")
    inlines = (VersionInline,)
    actions = ("archive", "bring_back")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Assistant]:
        found = super().get_queryset(request).select_related("owner")
        return found.prefetch_related("groups").annotate(run_count=Count("versions__runs"))

    def has_change_permission(self, request: HttpRequest, obj: Assistant | None = None) -> bool:
        """A person's own assistant is theirs to change: staff see it read-only."""
        if obj is not None and not obj.is_site:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Assistant | None = None) -> bool:
        return False  # archived instead: runs name its versions

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """After its groups and servers are saved: the new version, by this staff member."""
        super().save_related(request, form, formsets, change)
        by = request.user if isinstance(request.user, User) else None
        new_version(form.instance, by)

    @admin.display(description="whose")
    def whose(self, assistant: Assistant) -> str:
        return "the site's" if assistant.is_site else assistant.owner.get_username()  # type: ignore[union-attr]

    @admin.display(description="shared with")
    def shared_with(self, assistant: Assistant) -> str:
        if assistant.everyone:
            return "everyone"
        return ", ".join(group.name for group in assistant.groups.all()) or "—"

    @admin.display(description="archived", boolean=True)
    def archived(self, assistant: Assistant) -> bool:
        return assistant.archived_at is not None

    @admin.display(description="runs")
    def runs(self, assistant: Assistant) -> str:
        url = reverse("admin:agent_agentrun_changelist") + f"?assistant={assistant.pk}"
        count = getattr(assistant, "run_count", 0)
        return format_html('<a href="{}">{} run{}</a>', url, count, "" if count == 1 else "s")

    @admin.action(description="Archive the selected assistants (no new conversation or turn)")
    def archive(self, request: HttpRequest, queryset: QuerySet[Assistant]) -> None:
        self.archived_as(request, queryset, archived=True)

    @admin.action(description="Bring back the selected assistants")
    def bring_back(self, request: HttpRequest, queryset: QuerySet[Assistant]) -> None:
        self.archived_as(request, queryset, archived=False)

    def archived_as(
        self, request: HttpRequest, queryset: QuerySet[Assistant], *, archived: bool
    ) -> None:
        for assistant in queryset:
            set_archived(assistant, archived)
        said = "Archived" if archived else "Brought back"
        messages.success(request, f"{said} {queryset.count()} assistant(s).")


class AssistantFilter(admin.SimpleListFilter):
    """The runs of one assistant (any version): `?assistant=<id>`, which each assistant's runs
    link sets. Listing every assistant here would cost a query on every page of runs."""

    title = "assistant (its runs link)"
    parameter_name = "assistant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = user_id(self.value())  # a positive id, or None
        if chosen is None:
            return []
        name = Assistant.objects.filter(pk=chosen).values_list("name", flat=True).first()
        return [(str(chosen), name or f"assistant {chosen}")]

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        chosen = user_id(self.value())
        if chosen is None:
            messages.warning(request, f"Ignored the assistant filter: {self.value()!r} is no id.")
            return queryset
        return queryset.filter(assistant_version__assistant=chosen)
