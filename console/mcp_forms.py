"""The console's form for a site server: its address checked before anything connects, and its
credentials taken in and sealed, never shown back (not even the ones just typed, when the form
comes back with an error). A person's own servers have theirs in mcp_servers/forms.py."""

import ipaddress
import json
import re
from typing import Any

import httpx2
from django import forms
from django.utils.html import escape

from mcp_servers.models import HEADERS, NO_AUTH, McpServer
from mcp_servers.networks import private_networks
from mcp_servers.secrets import encrypt
from netguard.ssrf import ANYWHERE, UnsafeUrl, check_url, refused_reason

# An HTTP header's name (RFC 9110 token).
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
AUTHORIZATION = "authorization"


class SecretTextarea(forms.Textarea):
    """A textarea that never renders a value: what was typed goes in, and nothing comes out."""

    def format_value(self, value: Any) -> None:
        return None


def check_site_url(url: str) -> None:
    """netguard.ssrf.check_url (on LOOP_MCP_PRIVATE_NETWORKS), except that an operator's own
    server may be on the operator's own network (loopback, private), as the connection guard lets
    it be (netguard.ssrf.ANYWHERE): only
    what no server may be, a metadata address or a URL that is not http(s), is refused."""
    try:
        check_url(url, private_networks())
    except UnsafeUrl as refused:
        if not on_operators_network(url):
            raise forms.ValidationError(str(refused)) from None


def on_operators_network(url: str) -> bool:
    """The URL is plain http(s) to an address written out that a site server may have. An
    address in an unusual spelling (0x7f.1) is not read here, so it stays refused."""
    try:
        parsed = httpx2.URL(url)
        address = ipaddress.ip_address(parsed.host)
    except (httpx2.InvalidURL, ValueError):
        return False
    plain = parsed.scheme in ("http", "https") and not parsed.userinfo
    return plain and refused_reason(address, ANYWHERE) is None


def parsed_headers(text: str) -> dict[str, str]:
    """`Name: value` lines as headers; a line that is not one says which it is."""
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not HEADER_NAME.match(name) or not value:
            # The line itself is not repeated: it may hold a secret.
            raise forms.ValidationError(f"Line {number} is not “Name: value”.")
        headers[name] = value
    return headers


class SiteServerForm(forms.ModelForm[McpServer]):
    """A site server added or changed in the console. The credentials fields start empty; left
    empty, the sealed ones are kept."""

    headers = forms.CharField(
        required=False,
        widget=SecretTextarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="One “Name: value” per line. Sealed when saved, and never shown again.",
    )
    token = forms.CharField(
        required=False,
        label="Bearer token",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Sent as “Authorization: Bearer …”. Sealed when saved, never shown again.",
    )
    clear_credentials = forms.BooleanField(
        required=False, label="Clear the stored headers and token"
    )

    class Meta:
        model = McpServer
        fields = (
            "name",
            "url",
            "prefix",
            "enabled",
            "auth",
            "everyone",
            "users",
            "groups",
            "trust_hints",
            "call_seconds",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["url"].required = True
        if "prefix" in self.fields:  # set once, when the server is added
            # The admin draws a help text as HTML: the model's <prefix>__<tool> would vanish.
            self.fields["prefix"].help_text = escape(self.fields["prefix"].help_text)
        if self.instance.sealed_headers:
            for name in ("headers", "token"):
                self.fields[name].help_text += " Set: leave empty to keep."

    def clean_url(self) -> str:
        url = str(self.cleaned_data["url"]).strip()
        check_site_url(url)
        return url

    def clean_call_seconds(self) -> int | None:
        seconds: int | None = self.cleaned_data["call_seconds"]
        if seconds is not None and seconds < 1:
            raise forms.ValidationError("At least one second.")
        return seconds

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            new = self.new_headers(cleaned)
        except forms.ValidationError as error:
            self.add_error("headers", error)
            return cleaned
        if new and cleaned.get("clear_credentials"):
            self.add_error(
                "clear_credentials", "Clear the stored ones, or give new ones: not both."
            )
        keeps = bool(self.instance.sealed_headers) and not cleaned.get("clear_credentials")
        auth = cleaned.get("auth")
        if auth == NO_AUTH and new:
            self.add_error("auth", "Headers or a token were given: choose “Headers”.")
        if auth == HEADERS and not (new or keeps):
            self.add_error("auth", "Give the headers or the bearer token to send.")
        cleaned["sealed"] = self.sealed(new, keeps and auth != NO_AUTH)
        return cleaned

    def new_headers(self, cleaned: dict[str, Any]) -> dict[str, str]:
        headers = parsed_headers(cleaned.get("headers") or "")
        token = (cleaned.get("token") or "").strip()
        if token:
            if any(name.lower() == AUTHORIZATION for name in headers):
                raise forms.ValidationError("An Authorization header and a token: give one.")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def sealed(self, new: dict[str, str], keep: bool) -> str:
        """The `sealed_headers` to store: the new ones sealed, the stored ones, or none."""
        if new:
            return encrypt(json.dumps(new))
        return self.instance.sealed_headers if keep else ""

    def save(self, commit: bool = True) -> McpServer:
        server: McpServer = super().save(commit=False)
        server.sealed_headers = self.cleaned_data["sealed"]
        if commit:
            server.save()
            self.save_m2m()
        return server
