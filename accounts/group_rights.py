"""A group's rights in the console (rights.models.GroupRights), on its group's page: the models,
built-in tools and MCP servers its people may use, and the tools they are asked about before each
call. Saved with the group, so its change is in the group's history like any change. Also the
person's rights as their groups give them, and what a run was allowed, in words."""

from typing import Any, cast

from django import forms
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from accounting.models import Quota
from agent.llm.factory import offered_models
from console.widgets import change_url, link
from mcp_servers.models import McpServer, McpTool
from memory.tools import REMEMBER
from rights.described import described, lines_html, server_names
from rights.effective import Rights, group_rows, of_group, rights_of
from rights.models import GroupRights
from tools.registry import BUILTIN_TOOLS

NO_LONGER = "(no longer offered)"


def with_stored(choices: list[tuple[str, str]], stored: list[str]) -> list[tuple[str, str]]:
    """The choices, and the stored names no longer among them, kept visible to untick."""
    known = {value for value, _ in choices}
    return [*choices, *((name, f"{name} {NO_LONGER}") for name in stored if name not in known)]


def model_choices() -> list[tuple[str, str]]:
    return [(choice.name, choice.name) for choice in offered_models()]


def tool_choices() -> list[tuple[str, str]]:
    return [(tool.name, tool.name) for tool in (*BUILTIN_TOOLS, REMEMBER)]


def site_tools() -> list[McpTool]:
    tools = McpTool.objects.filter(server__owner__isnull=True).select_related("server")
    return list(tools.order_by("server__name", "exposed_name"))


def ask_choices(mcp_tools: list[McpTool]) -> list[tuple[str, str]]:
    mcp = [(tool.exposed_name, f"{tool.exposed_name} ({tool.server.name})") for tool in mcp_tools]
    return [*tool_choices(), *mcp]


class GroupRightsForm(forms.ModelForm[GroupRights]):
    decides = forms.BooleanField(
        required=False,
        label="This group decides what its people may use",
        help_text="Tick to give this group rights. A group without them decides nothing: a "
        "person in no group with rights gets LOOP_UNGROUPED_RIGHTS.",
    )
    model_names = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Models",
        help_text="With “every model” off.",
    )
    tool_names = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Built-in tools",
        help_text="With “every built-in tool” off.",
    )
    mcp_servers = forms.ModelMultipleChoiceField(
        queryset=McpServer.objects.filter(owner__isnull=True).order_by("name"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="MCP servers",
        help_text="The site's servers, with “every MCP server” off. A server stays closed to a "
        "person it is not open to, whatever this says.",
    )
    ask_before = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Ask before",
        help_text="Its people decide before each call of these, whatever they chose themselves. "
        "A person in several groups is asked only if every group of theirs giving the tool asks.",
    )

    class Meta:
        model = GroupRights
        fields = (
            "all_models",
            "model_names",
            "all_tools",
            "tool_names",
            "all_mcp_servers",
            "mcp_servers",
            "ask_before",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        row = self.instance
        self.mcp_tools = site_tools()
        self.fields["all_models"].label = "Every model"
        self.fields["all_tools"].label = "Every built-in tool"
        self.fields["all_mcp_servers"].label = "Every MCP server"
        for name, choices, stored in (
            ("model_names", model_choices(), row.model_names),
            ("tool_names", tool_choices(), row.tool_names),
            ("ask_before", ask_choices(self.mcp_tools), row.ask_before),
        ):
            field = cast(forms.MultipleChoiceField, self.fields[name])
            field.choices = with_stored(choices, stored)
        if row.pk is not None:  # it decides; the inline's Delete takes its rights away
            self.fields["decides"].initial = True
            self.fields["decides"].widget = forms.HiddenInput()

    def has_changed(self) -> bool:
        """A new row is made only when "decides" is ticked: its defaults (everything) are a
        choice of their own, not to be made by saving the group."""
        if self.instance.pk is None:
            return bool(self["decides"].data)
        return super().has_changed()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for every, listed, words in (
            ("all_models", "model_names", "every model"),
            ("all_tools", "tool_names", "every built-in tool"),
            ("all_mcp_servers", "mcp_servers", "every MCP server"),
        ):
            if data.get(every) and data.get(listed):
                self.add_error(
                    listed,
                    f"“{words[0].upper()}{words[1:]}” is ticked, so the ones ticked here would say "
                    f"nothing: untick them, or untick “{words}” to allow only these.",
                )
        for name in data.get("ask_before") or ():
            if not self.gives(data, name):
                self.add_error(
                    "ask_before",
                    f"This group does not give {name}, so asking about it would change nothing: "
                    "give the tool (or its server) above, or untick it here.",
                )
        return data

    def gives(self, data: dict[str, Any], name: str) -> bool:
        """Whether the rights in `data` give tool `name` (an MCP tool: its server)."""
        tool = next((tool for tool in self.mcp_tools if tool.exposed_name == name), None)
        if tool is None:
            return bool(data.get("all_tools")) or name in (data.get("tool_names") or ())
        servers = data.get("mcp_servers") or ()
        return bool(data.get("all_mcp_servers")) or tool.server in servers


class GroupRightsInline(admin.StackedInline[GroupRights, Group]):
    model = GroupRights
    form = GroupRightsForm
    extra = 1
    max_num = 1
    can_delete = True
    verbose_name = "what its people may use"
    verbose_name_plural = "what its people may use"


def quotas_of(group: Group) -> SafeString:
    """The group's quotas (accounting.models.Quota), each a link, and a link to add one."""
    if group.pk is None:
        return format_html("{}", "Save the group first, then add its quotas.")
    quotas = Quota.objects.filter(group=group).order_by("measure")
    added = link(reverse("admin:accounting_quota_add") + f"?group={group.pk}", "Add a quota")
    if not quotas:
        return format_html("None. {}", added)
    listed = format_html_join(
        "",
        "<li>{}</li>",
        ((link(change_url(model=Quota, pk=quota.pk), quota),) for quota in quotas),
    )
    return format_html("<ul>{}</ul>{}", listed, added)


def headed(heading: str, rights: Rights, names: dict[int, str]) -> SafeString:
    return format_html("<h3>{}</h3>{}", heading, lines_html(described(rights, names)))


def person_rights(user: User) -> SafeString:
    """What the person may use and which group gives what (read-only)."""
    if user.pk is None:
        return format_html("{}", "—")
    names = server_names()
    rows = group_rows(user)
    parts = [headed(f"Group {row.group.name}", of_group(row, ids), names) for row, ids in rows]
    if not rows:
        parts.append(
            format_html(
                "<p>{}</p>",
                "In no group with rights: LOOP_UNGROUPED_RIGHTS decides (below).",
            )
        )
    parts.append(headed("Together: what they may use", rights_of(user), names))
    return format_html_join("", "{}", ((part,) for part in parts))
