"""The forms of a person's Tools page: a server of their own, and their choice of its tools.
They check shapes only; what may be saved is mcp_servers/personal.py's to decide."""

from typing import Any, cast

from django import forms
from django.http import QueryDict

from mcp_servers.models import HEADERS, PREFIX_CHARS, McpServer, McpTool
from mcp_servers.personal import AUTH_MODES, BEARER, Given, auth_mode

KEPT = "Set: leave empty to keep it."


class ServerForm(forms.Form):
    """A server's name, address and credentials. The credentials are never put back in the page:
    a stored token or header set shows as "set", and an empty field keeps it."""

    name = forms.CharField(max_length=80)
    url = forms.CharField(
        max_length=500,
        label="URL",
        help_text="Its Streamable HTTP endpoint, say https://mcp.example.com/mcp.",
    )
    # A field, not the form's own `prefix`: the form's metaclass takes declared fields off the
    # class, which mypy does not know.
    prefix = forms.CharField(  # type: ignore[assignment]
        max_length=PREFIX_CHARS,
        required=False,
        help_text="The model sees its tools as <prefix>__<tool>. Empty: made from the name.",
    )
    auth = forms.ChoiceField(choices=AUTH_MODES, label="Authentication", widget=forms.RadioSelect)
    token = forms.CharField(
        required=False,
        max_length=4096,
        label="Token",
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )
    headers = forms.CharField(
        required=False,
        max_length=20 * 4200,
        label="Headers",
        help_text="One “Name: value” a line.",
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, data: QueryDict | None = None, *, server: McpServer | None = None) -> None:
        initial: dict[str, Any] = {"auth": "none"}
        if server is not None:
            initial = {"name": server.name, "url": server.url, "auth": auth_mode(server)}
        super().__init__(data, initial=initial)
        self.server = server
        if server is not None:
            # Fixed once added: it names the tools a conversation's "always allow" gave.
            del self.fields["prefix"]
            self._mark_kept(auth_mode(server) if server.sealed_headers else "")

    def _mark_kept(self, mode: str) -> None:
        field = {BEARER: "token", HEADERS: "headers"}.get(mode)
        if field:
            self.fields[field].help_text = KEPT

    def given(self) -> Given:
        """What was given, for mcp_servers.personal (call after is_valid)."""
        data = self.cleaned_data
        secret = data["token"] if data["auth"] == BEARER else data["headers"]
        return Given(
            name=data["name"].strip(),
            url=data["url"].strip(),
            auth=data["auth"],
            prefix=data.get("prefix", "").strip(),
            secret=secret or "",
        )


class ToolChoicesForm(forms.Form):
    """Which of a server's tools are offered to the model, and which run without asking: the
    ids of its tools checked (the page draws one box of each kind per tool)."""

    enabled = forms.TypedMultipleChoiceField(coerce=int, required=False)
    auto = forms.TypedMultipleChoiceField(coerce=int, required=False)

    def __init__(self, data: QueryDict | None = None, *, tools: list[McpTool]) -> None:
        super().__init__(data)
        choices = [(tool.pk, tool.exposed_name) for tool in tools]
        for name in ("enabled", "auto"):
            cast(forms.ChoiceField, self.fields[name]).choices = choices
