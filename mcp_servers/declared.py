"""Site servers declared in the environment (LOOP_MCP_SERVERS), so a deployment is reproducible.

LOOP_MCP_SERVERS is a JSON list of objects: `name`, and `url` or (a stdio server, which only an
operator may configure) `command` as a list; optional `headers`, `tools` (the enabled ones;
default all), `auto` (the tools that run without asking), `prefix` (default: from the name),
`trust_hints`, `groups` (group names that may use it; default everyone). Each becomes a row of its
own (source "environment") that the console shows read-only; the environment stays the authority
over its settings at every start.
"""

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from mcp_servers.models import ENVIRONMENT, PREFIX_CHARS, McpServer, McpTool, prefix_validator
from mcp_servers.secrets import decrypt, encrypt

KEYS = {"name", "url", "command", "headers", "tools", "auto", "prefix", "trust_hints", "groups"}


@dataclass(frozen=True)
class Declared:
    name: str
    prefix: str
    url: str = ""
    command: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, compare=False)
    tools: frozenset[str] | None = None
    auto: frozenset[str] = frozenset()
    trust_hints: bool = False
    groups: tuple[str, ...] = ()


def declared(raw: str | None = None) -> list[Declared]:
    """LOOP_MCP_SERVERS read; a mistake is ImproperlyConfigured saying which entry and why."""
    raw = settings.LOOP_MCP_SERVERS if raw is None else raw
    if not raw.strip():
        return []
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ImproperlyConfigured(f"LOOP_MCP_SERVERS is not JSON: {error}") from None
    if not isinstance(entries, list):
        raise ImproperlyConfigured("LOOP_MCP_SERVERS must be a JSON list of objects.")
    servers = [_entry(number, entry) for number, entry in enumerate(entries, start=1)]
    for attribute in ("name", "prefix"):
        values = [getattr(server, attribute) for server in servers]
        if len(set(values)) != len(values):
            raise ImproperlyConfigured(f"LOOP_MCP_SERVERS: two servers have the same {attribute}.")
    return servers


def _entry(number: int, entry: Any) -> Declared:
    where = f"LOOP_MCP_SERVERS entry {number}"
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"{where} is not an object.")
    unknown = set(entry) - KEYS
    if unknown:
        raise ImproperlyConfigured(f"{where} has unknown keys: {', '.join(sorted(unknown))}.")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ImproperlyConfigured(f"{where} needs a name.")
    url, command = entry.get("url", ""), entry.get("command", [])
    if bool(url) == bool(command):
        raise ImproperlyConfigured(f"{where} ({name}) needs a url or a command, not both.")
    if not isinstance(url, str) or not _strings(command):
        raise ImproperlyConfigured(f"{where} ({name}): url is a string, command a list of them.")
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not _strings(list(headers.values())):
        raise ImproperlyConfigured(f"{where} ({name}): headers is an object of strings.")
    return Declared(
        name=name.strip()[:80],
        prefix=_prefix(where, entry.get("prefix") or name),
        url=url,
        command=tuple(command),
        headers={str(key): value for key, value in headers.items()},
        tools=_names(where, entry, "tools"),
        auto=_names(where, entry, "auto") or frozenset(),
        trust_hints=bool(entry.get("trust_hints", False)),
        groups=tuple(_names(where, entry, "groups") or ()),
    )


def _strings(values: Any) -> bool:
    return isinstance(values, list) and all(isinstance(value, str) for value in values)


def _names(where: str, entry: dict[str, Any], key: str) -> frozenset[str] | None:
    if key not in entry:
        return None
    if not _strings(entry[key]):
        raise ImproperlyConfigured(f"{where}: {key} is a list of names.")
    return frozenset(entry[key])


def _prefix(where: str, raw: str) -> str:
    prefix = re.sub(r"[^a-z0-9]+", "_", raw.lower()).strip("_")[:PREFIX_CHARS].strip("_")
    try:
        prefix_validator(prefix)
    except Exception:
        raise ImproperlyConfigured(f"{where}: cannot make a prefix of {raw!r}; give one.") from None
    return prefix


_synced: str | None = None


def ensure_declared() -> None:
    """Bring the environment's servers into the database: at a process's first look, when the
    setting changed, or when its rows are not all there (a database restored, or emptied by a
    test); one count query while they are."""
    global _synced
    raw = settings.LOOP_MCP_SERVERS
    if _synced == raw and (not raw.strip() or _all_there(raw)):
        return
    sync(declared())
    _synced = raw


@functools.lru_cache(maxsize=4)
def _declared_names(raw: str) -> tuple[str, ...]:
    return tuple(server.name for server in declared(raw))


def _all_there(raw: str) -> bool:
    """One count query (a run start asks): the setting is parsed once per value."""
    names = _declared_names(raw)
    present = McpServer.objects.filter(
        source=ENVIRONMENT, owner__isnull=True, enabled=True, name__in=names
    )
    return present.count() == len(names)


@transaction.atomic
def sync(servers: list[Declared]) -> None:
    names = [server.name for server in servers]
    McpServer.objects.filter(source=ENVIRONMENT).exclude(name__in=names).update(enabled=False)
    for server in servers:
        row, _ = McpServer.objects.update_or_create(
            owner=None,
            name=server.name,
            defaults={
                "source": ENVIRONMENT,
                "prefix": server.prefix,
                "url": server.url,
                "command": list(server.command),
                "enabled": True,
                "everyone": not server.groups,
                "trust_hints": server.trust_hints,
            },
        )
        _seal_headers(row, server.headers)
        row.groups.set(Group.objects.filter(name__in=server.groups))
        apply_choices(row, server)


def _seal_headers(row: McpServer, headers: dict[str, str]) -> None:
    current = json.loads(decrypt(row.sealed_headers)) if row.sealed_headers else {}
    if current != headers:
        row.sealed_headers = encrypt(json.dumps(headers)) if headers else ""
        row.auth = "headers" if headers else "none"
        row.save(update_fields=["sealed_headers", "auth"])


def declared_tools(name: str) -> set[str] | None:
    """The tools the environment enables on the server `name` (None: all)."""
    server = next((entry for entry in declared() if entry.name == name), None)
    return None if server is None or server.tools is None else set(server.tools)


def apply_choices(row: McpServer, server: Declared | None = None) -> None:
    """The environment's `tools` and `auto` over the server's discovered tools."""
    if server is None:
        server = next((entry for entry in declared() if entry.name == row.name), None)
        if server is None:
            return
    tools = McpTool.objects.filter(server=row)
    if server.tools is not None:
        tools.exclude(name__in=server.tools).update(enabled=False)
        tools.filter(name__in=server.tools).update(enabled=True)
    tools.update(auto=False)
    tools.filter(name__in=server.auto).update(auto=True)
