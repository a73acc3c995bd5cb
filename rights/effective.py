"""A person's effective rights: the one answer the chat, `runagent`, the API and the worker ask
about what a person (and a run of theirs) may use.

Rights are the union of the person's groups' (rights.models.GroupRights), under the site's own
policy: a model the site does not offer, or an MCP server not open to the person, stays out
whatever a group says, and a tool the site asks about still asks. A tool asks before each call
when every group of theirs that grants it asks (the least strict group wins, as rights are a
union). A person in no group with rights gets LOOP_UNGROUPED_RIGHTS: `all` (everything the site
offers, as before groups decided anything) or `none` (no model, so no run; no tool).

A run records its rights when it starts (AgentRun.allowed, `record()`); the worker narrows the
record by the rights as they stand at each attempt, so a right taken away also binds a run that
resumes (`narrowed`).
"""

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Q

from mcp_servers.pinning import SEPARATOR
from rights.models import GroupRights

ALL = "all"
NONE = "none"


def _narrowed(mine: frozenset[Any] | None, theirs: frozenset[Any] | None) -> frozenset[Any] | None:
    if mine is None:
        return theirs
    if theirs is None:
        return mine
    return mine & theirs


def _joined(mine: frozenset[Any] | None, theirs: frozenset[Any] | None) -> frozenset[Any] | None:
    if mine is None or theirs is None:
        return None
    return mine | theirs


def _listed(values: frozenset[Any] | None) -> list[Any] | None:
    return None if values is None else sorted(values)


def _set(values: Iterable[Any] | None) -> frozenset[Any] | None:
    return None if values is None else frozenset(values)


@dataclass(frozen=True)
class Rights:
    """What may be used. Each `None` is "whatever the site offers" of that kind."""

    models: frozenset[str] | None = None  # qualified model names (ModelChoice.name)
    tools: frozenset[str] | None = None  # built-in tools by name
    mcp_servers: frozenset[int] | None = None  # McpServer ids
    ask: frozenset[str] = field(default_factory=frozenset)  # tools asked about before each call
    memory: bool = True  # long-term memory: recalled into the run, its outcome remembered

    def allows_model(self, name: str) -> bool:
        return self.models is None or name in self.models

    def allows_tool(self, name: str, server_id: int | None = None) -> bool:
        """A built-in tool by its name; an MCP tool by its server."""
        if server_id is not None:
            return self.mcp_servers is None or server_id in self.mcp_servers
        return self.tools is None or name in self.tools

    def narrowed(self, other: "Rights") -> "Rights":
        """What both allow: a run's record under the rights as they stand now, or a person's
        rights under an assistant's choices. Asks add up."""
        return Rights(
            models=_narrowed(self.models, other.models),
            tools=_narrowed(self.tools, other.tools),
            mcp_servers=_narrowed(self.mcp_servers, other.mcp_servers),
            ask=self.ask | other.ask,
            memory=self.memory and other.memory,
        )

    def record(self) -> dict[str, Any]:
        """As a run stores it (AgentRun.allowed["rights"]): JSON, every list sorted."""
        return {
            "models": _listed(self.models),
            "tools": _listed(self.tools),
            "mcp_servers": _listed(self.mcp_servers),
            "ask": sorted(self.ask),
            "memory": self.memory,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> "Rights":
        """A stored record back; an empty or missing one (a run from before rights) allows
        whatever the site offers."""
        record = record or {}
        return cls(
            models=_set(record.get("models")),
            tools=_set(record.get("tools")),
            mcp_servers=_set(record.get("mcp_servers")),
            ask=frozenset(record.get("ask") or ()),
            memory=bool(record.get("memory", True)),
        )


EVERYTHING = Rights()
NOTHING = Rights(models=frozenset(), tools=frozenset(), mcp_servers=frozenset())


def ungrouped() -> Rights:
    return NOTHING if settings.LOOP_UNGROUPED_RIGHTS == NONE else EVERYTHING


def of_group(row: GroupRights, servers: list[int | None]) -> Rights:
    return Rights(
        models=None if row.all_models else frozenset(row.model_names),
        tools=None if row.all_tools else frozenset(row.tool_names),
        mcp_servers=None if row.all_mcp_servers else frozenset(s for s in servers if s),
        ask=frozenset(row.ask_before),
    )


# The rights read in this request, by person (rights.middleware.RightsPerRequest): a page, its
# checks and the run it starts ask rights_of several times, and one read answers them all. Never
# kept beyond the request, and forgotten at once when a group's rights or a person's groups
# change within it (rights.signals).
_read_in_request: ContextVar[dict[int, "Rights"] | None] = ContextVar(
    "rights_read_in_request", default=None
)


@contextmanager
def read_once() -> Iterator[None]:
    """Within this, rights_of reads each person's rights once."""
    token = _read_in_request.set({})
    try:
        yield
    finally:
        _read_in_request.reset(token)


def forget_read() -> None:
    """Rights changed: the next rights_of reads them again."""
    read = _read_in_request.get()
    if read is not None:
        read.clear()


def rights_of(user: User | AnonymousUser) -> Rights:
    """The person's effective rights, in one read (once a request: `read_once`)."""
    if not user.is_authenticated:
        return NOTHING
    read = _read_in_request.get()
    if read is not None and user.pk in read:
        return read[user.pk]
    rights = rights_read(user)
    if read is not None:
        read[user.pk] = rights
    return rights


def rights_read(user: User) -> Rights:
    groups = [of_group(row, servers) for row, servers in group_rows(user)]
    return united(groups) if groups else ungrouped()


def group_rows(user: User) -> list[tuple[GroupRights, list[int | None]]]:
    """The person's groups' rights rows, each with its servers' ids: one query."""
    rows = GroupRights.objects.filter(group__user=user).annotate(
        servers=ArrayAgg("mcp_servers", filter=Q(mcp_servers__isnull=False), default=[])
    )
    rows = rows.select_related("group").order_by("group__name")
    return [(row, row.servers) for row in rows]


def united(groups: list[Rights]) -> Rights:
    """The union of several groups' rights; a tool asks if every group granting it asks."""
    union = groups[0]
    for rights in groups[1:]:
        union = Rights(
            models=_joined(union.models, rights.models),
            tools=_joined(union.tools, rights.tools),
            mcp_servers=_joined(union.mcp_servers, rights.mcp_servers),
        )
    asked = frozenset().union(*(rights.ask for rights in groups))
    ask = frozenset(name for name in asked if all(_asks(rights, name) for rights in groups))
    return Rights(union.models, union.tools, union.mcp_servers, ask)


def _asks(rights: Rights, name: str) -> bool:
    """Whether a group asks about tool `name`, or does not grant it (so has no say). An MCP
    tool (`<prefix>__<tool>`) is granted by a group that grants any MCP server."""
    if name in rights.ask:
        return True
    if SEPARATOR in name:
        return rights.mcp_servers == frozenset()
    return rights.tools is not None and name not in rights.tools
