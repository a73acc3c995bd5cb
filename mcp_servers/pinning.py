"""Tool definitions pinned by digest, and held for review when they change.

The model is shown a tool's pinned definition and its arguments are checked against the pinned
schema, whatever the server says later: a server that changes a tool after it was enabled (a
"rug pull": new instructions in a description, a new argument) gets the tool put on hold, not
offered, until whoever enabled it (its operator, or for a personal server its person) reads the
difference and accepts it. A description is capped before anyone is shown it.
"""

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from mcp_servers.client import Definition, Listing
from mcp_servers.models import McpServer, McpTool

# The model's function names: letters, digits, _ and -, at most 64.
NAME_CHARS = 64
SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# A schema longer than this (as JSON) is not offered: it is text the model reads, and room for
# instructions as much as a description is.
SCHEMA_CHARS = 16_000
# Schema keywords whose values are data (what arguments must equal), not schemas.
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Schema keywords whose values map names (a property's, a definition's) to schemas.
NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
REMOTE_NAME_CHARS = McpTool._meta.get_field("name").max_length or 128


def digest_of(definition: Definition) -> str:
    """The digest of everything the model would be shown or checked against, as the server sent
    it (before any cap, so a change past the cap is a change too)."""
    canonical = json.dumps(definition.as_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def exposed_name(prefix: str, name: str) -> str:
    """`<prefix>__<name>`, made a valid function name; a long one keeps a digest of the whole."""
    full = f"{prefix}{SEPARATOR}{_UNSAFE.sub('_', name)}"
    if len(full) <= NAME_CHARS:
        return full
    tail = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{full[: NAME_CHARS - len(tail) - 1]}_{tail}"


def capped(description: str) -> str:
    limit = settings.LOOP_MCP_DESCRIPTION_CHARS
    if len(description) <= limit:
        return description
    cut = len(description) - limit
    return f"{description[:limit]} [… {cut} more characters not shown]"


def shown(definition: Definition) -> dict[str, Any]:
    """The definition as Loop keeps and shows it: its descriptions capped, the tool's and those
    in its schema (a parameter's description is read by the model as much as the tool's)."""
    return {
        **definition.as_json(),
        "description": capped(definition.description),
        "input_schema": _capped_schema(definition.input_schema),
    }


def _capped_schema(node: Any) -> Any:
    """The schema with every `description` annotation capped; the values arguments are checked
    against (DATA_KEYWORDS) kept whole."""
    if isinstance(node, list):
        return [_capped_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    kept = {}
    for key, value in node.items():
        if key in DATA_KEYWORDS:
            kept[key] = value
        elif key in NAMED_SCHEMAS and isinstance(value, dict):  # names, each with its schema
            kept[key] = {name: _capped_schema(schema) for name, schema in value.items()}
        else:
            kept[key] = _capped_schema(value)
    if isinstance(kept.get("description"), str):
        kept["description"] = capped(kept["description"])
    return kept


def refused(definition: Definition) -> str | None:
    """Why a definition cannot be offered at all, or None."""
    if not 0 < len(definition.name) <= REMOTE_NAME_CHARS:  # the server's own name, as kept
        return f"its name is not 1 to {REMOTE_NAME_CHARS} characters"
    schema = definition.input_schema
    if len(json.dumps(schema)) > SCHEMA_CHARS:
        return f"its input schema is over {SCHEMA_CHARS} characters"
    if schema.get("type") != "object":
        return "its input schema is not an object"
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as error:
        return f"its input schema is not valid JSON Schema ({error.message})"
    return None


@dataclass
class Changes:
    """What a discovery found, for the console and the person's page."""

    added: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


@transaction.atomic
def apply_listing(server: McpServer, listing: Listing, enabled: set[str] | None = None) -> Changes:
    """Bring the server's pinned tools up to what it listed. A new tool is pinned (enabled unless
    `enabled` names the ones to enable), an unchanged one stays, a changed one is held."""
    definitions, changes = _considered(listing)
    known = {tool.name: tool for tool in McpTool.objects.select_for_update().filter(server=server)}
    taken = {tool.exposed_name for tool in known.values()}
    now = timezone.now()
    for definition in definitions:
        tool = known.pop(definition.name, None)
        if tool is None:
            taken.add(_pin(server, definition, enabled, now, taken))
            changes.added.append(definition.name)
        elif _compare(tool, definition, now):
            changes.held.append(definition.name)
    for tool in known.values():
        if tool.missing_since is None:
            tool.missing_since = now
            tool.save(update_fields=["missing_since"])
        changes.missing.append(tool.name)
    _record_health(server, listing, changes, now)
    return changes


def compared(server: McpServer, listing: Listing) -> Changes:
    """What a discovery of `listing` would find, changing nothing (`mcpcheck`): the tools it would
    pin as new, those it would hold (listed unlike their pinned definition, whether held
    already or not), those no longer listed, and those it would refuse."""
    definitions, changes = _considered(listing)
    known = {tool.name: tool for tool in McpTool.objects.filter(server=server)}
    for definition in definitions:
        tool = known.pop(definition.name, None)
        if tool is None:
            changes.added.append(definition.name)
        elif digest_of(definition) != tool.digest:
            changes.held.append(definition.name)
    changes.missing.extend(sorted(known))
    return changes


def _considered(listing: Listing) -> tuple[list[Definition], Changes]:
    """The definitions a discovery takes up (within the cap per server), and the changes with
    those it refuses, and why."""
    changes, definitions = Changes(), []
    for definition in listing.definitions[: settings.LOOP_MCP_TOOLS_PER_SERVER]:
        why = refused(definition)
        if why:
            changes.refused[definition.name] = why
        else:
            definitions.append(definition)
    return definitions, changes


def _pin(
    server: McpServer, definition: Definition, enabled: set[str] | None, now: Any, taken: set[str]
) -> str:
    """Pin a tool seen for the first time; its exposed name (unique on the server)."""
    name = exposed_name(server.prefix, definition.name)
    if name in taken:  # two remote names that read the same once made safe
        name = exposed_name(server.prefix, f"{definition.name}_{digest_of(definition)[:6]}")
    McpTool.objects.create(
        server=server,
        name=definition.name,
        exposed_name=name,
        **_pinned_fields(definition),
        pinned_at=now,
        enabled=enabled is None or definition.name in enabled,
    )
    return name


def _pinned_fields(definition: Definition) -> dict[str, Any]:
    kept = shown(definition)
    return {
        "title": kept["title"][:200],
        "description": kept["description"],
        "input_schema": kept["input_schema"],
        "annotations": kept["annotations"],
        "digest": digest_of(definition),
    }


def _compare(tool: McpTool, definition: Definition, now: Any) -> bool:
    """Hold the tool if its definition differs from the pinned one; True if it is now held."""
    digest = digest_of(definition)
    update: dict[str, Any] = {"missing_since": None}
    if digest == tool.digest:  # as pinned (a held change taken back counts as no change)
        update.update(held_definition=None, held_digest="", held_at=None)
    elif digest != tool.held_digest:
        update.update(held_definition=shown(definition), held_digest=digest, held_at=now)
    McpTool.objects.filter(pk=tool.pk).update(**update)
    return bool(update.get("held_digest"))


def _record_health(server: McpServer, listing: Listing, changes: Changes, now: Any) -> None:
    problems = [f"{name}: {why}" for name, why in changes.refused.items()]
    McpServer.objects.filter(pk=server.pk).update(
        discovered_at=now,
        last_error="; ".join(problems)[:2000],
        protocol_version=listing.protocol_version[:32],
        server_info=listing.server_info[:200],
        stale=False,
    )


@transaction.atomic
def accept_held(tool: McpTool) -> bool:
    """Its reviewer accepts the held definition: it becomes the pinned one. False when nothing
    is held (accepted already, or the server took the change back)."""
    locked = McpTool.objects.select_for_update().get(pk=tool.pk)
    if not locked.held_digest or locked.held_definition is None:
        return False
    held = locked.held_definition
    McpTool.objects.filter(pk=tool.pk).update(
        title=str(held.get("title") or "")[:200],
        description=str(held.get("description") or ""),
        input_schema=held.get("input_schema") or {},
        annotations=held.get("annotations") or {},
        digest=locked.held_digest,
        pinned_at=timezone.now(),
        held_definition=None,
        held_digest="",
        held_at=None,
    )
    return True
