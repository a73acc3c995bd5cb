"""A person's own data: all of it exported as one zip, or the account deleted (docs/privacy.md).

The export holds what Loop keeps about the person: their account, their conversations with every
run's transcript (the same loop.transcript/1 the operators' console exports), their runs outside
any conversation, their memories and their workspace's files. It is made as it is sent, a record
or a chunk of a file at a time, with no copy on disk and never more than a chunk in memory; the
workspace's files are stored, not compressed, so an export costs little CPU.

Deleting the account removes the person and what is theirs, and keeps the operators' audit of
what the account's runs did, without the person: the runs are handed to a placeholder account
that no one can log in to, and lose their conversation.
"""

import io
import json
import logging
import os
import posixpath
import secrets
import stat
import time
import zipfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.apps import apps
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.text import slugify

from accounting.erasure import hand_over_charges
from agent.instructions import personal_instructions_of
from agent.models import (
    FINISHED,
    AgentRun,
    Conversation,
    RunResume,
)
from agent.runs import request_cancel
from agent.transcripts import transcripts
from approvals.models import ApprovalPreference, ToolGrant
from assistants.models import Assistant
from mcp_servers.models import McpServer
from memory.forgetting import NOT_KEPT, forget
from memory.models import ForgottenMemory, Memory
from sandbox.fence import fence_directory
from sharing.models import SharedLink
from workspace.browse import BrowseError, components, escaped_name
from workspace.confined import DIRECTORY_FLAGS
from workspace.directory import workspace_path
from workspace.paths import MAX_PATH_DEPTH, Entry, normal_name, path_problem, remove_tree, walk

logger = logging.getLogger(__name__)

EXPORT_FORMAT = "loop.export/1"
# How many runs outside conversations one query of their transcripts reads at once.
LOOSE_RUNS_PER_BATCH = 100
# How much of a file is read at a time into the zip.
CHUNK_BYTES = 1024 * 1024
# A zip entry's date cannot be older than this (the format counts from 1980).
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
# How long a conversation's name in the zip may be.
SLUG_CHARS = 50
# The placeholder that keeps a deleted account's runs: "deleted-" and this many random hex digits.
PLACEHOLDER_PREFIX = "deleted-"
PLACEHOLDER_HEX = 12

README = """\
Your data from Loop, exported {exported} for {username}.

account.json        Your account: name, e-mail, when you joined and last logged in, and your
                    approval settings: which tool calls wait for your decision, and the tools
                    you always allowed in a conversation (revoked ones with when), your
                    instructions (how Loop should answer you), and
                    your own MCP servers with their tools (never their credentials), your
                    own assistants (as they stand, with how many versions they have had),
                    and the links you shared conversations by (who may open them, when
                    made and revoked, how often opened; never the link itself, which Loop
                    does not keep).
conversations/      One file per conversation, <id>-<title>.json: its title, its
                    instructions, when it was
                    started, updated and (if you deleted it) deleted, and every run's
                    transcript, oldest first. Conversations you deleted are included: Loop
                    keeps their runs for its operators' audit until you delete your account.
runs/               Your runs outside any conversation (started from the terminal), one
                    transcript per file, <id>.json.
memories.json       What Loop remembers about you: each memory's text, where it came from
                    (a run's outcome, or remembered on purpose), when it was stored and last
                    changed, how often and when it was last recalled, and the run that stored it.
files/              Your workspace, as the agent's file tools see it.{skipped}

A transcript is the JSON the operators' console exports (format loop.transcript/1): the run's
summary and its whole event log, each event's data as the log stores it. See docs/privacy.md
and docs/admin.md in Loop's source.
"""


class AccountNotDeleted(Exception):
    """Deleting the account was refused, and nothing was changed; the message says why."""


class WrongPassword(AccountNotDeleted):
    pass


@dataclass(frozen=True)
class Deletion:
    """What deleting an account did: who keeps its runs now, and how much went."""

    placeholder: User
    runs_cancelled: int
    runs_anonymised: int
    memories: int
    conversations: int


# The export ----------------------------------------------------------------------------------


def held_by(user: User) -> dict[str, int]:
    """How much Loop keeps of the person, for the page that offers to export or delete it."""
    return {
        "conversations": Conversation.objects.filter(owner=user).count(),
        "runs": AgentRun.objects.filter(user=user).count(),
        "memories": Memory.objects.filter(owner=user).count(),
    }


class Pipe(io.RawIOBase):
    """Where the zip is written, holding only what was written since it was last taken. It
    cannot seek, so zipfile writes each entry's size and checksum after its data (a data
    descriptor) and never goes back: the zip can be sent as it is made, with no copy on disk."""

    def __init__(self) -> None:
        super().__init__()
        self._written: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]  # zipfile writes bytes
        self._written.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        written = b"".join(self._written)
        self._written.clear()
        return written


def export_chunks(user: User) -> Generator[bytes]:
    """Everything Loop keeps of `user`, as one zip, in the pieces it is written in: a record or
    a chunk of a file at a time, so no more than about CHUNK_BYTES of it is held at once."""
    pipe = Pipe()
    for _ in write_export(user, pipe):
        if written := pipe.take():
            yield written


def write_export(user: User, pipe: Pipe) -> Iterator[None]:
    """Write the zip into `pipe`, pausing after each record and each chunk of a file. The
    records (JSON, small, compressible) are deflated; the workspace's files are stored, which
    costs no CPU for files that are mostly compressed already or large."""
    with zipfile.ZipFile(pipe, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in records(user):
            write_json(archive, name, content)
            yield
        skipped = yield from write_workspace(archive, workspace_path(user.pk))
        archive.writestr("README.txt", readme(user, skipped))
    yield


def records(user: User) -> Iterator[tuple[str, Any]]:
    """Each record of the person's, with its name in the zip."""
    yield "account.json", account_of(user)
    for conversation in Conversation.objects.filter(owner=user).order_by("pk"):
        yield conversation_name(conversation), conversation_of(conversation, user)
    for transcript in loose_transcripts(user):
        yield f"runs/{transcript['run']['id']}.json", transcript
    yield "memories.json", memories_of(user)


def write_json(archive: zipfile.ZipFile, name: str, content: Any) -> None:
    archive.writestr(name, json.dumps(content, indent=2, ensure_ascii=False))


def when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def account_of(user: User) -> dict[str, Any]:
    return {
        "format": EXPORT_FORMAT,
        "username": user.get_username(),
        "email": getattr(user, "email", ""),
        "first_name": getattr(user, "first_name", ""),
        "last_name": getattr(user, "last_name", ""),
        "date_joined": when(getattr(user, "date_joined", None)),
        "last_login": when(user.last_login),
        "approvals": approvals_of(user),
        "instructions": personal_instructions_of(user),
        "mcp_servers": mcp_servers_of(user),
        "assistants": assistants_of(user),
        "shared_links": shared_links_of(user),
    }


def assistants_of(user: User) -> list[dict[str, Any]]:
    """The person's own assistants as they stand (archived ones too), with the groups they are
    shared with: two queries."""
    mine = Assistant.objects.filter(owner=user).order_by("pk").prefetch_related("groups")
    return [
        {
            **snapshot_of_fields(assistant),
            "shared_with_groups": sorted(group.name for group in assistant.groups.all()),
            "versions": assistant.version,
            "created_at": when(assistant.created_at),
            "updated_at": when(assistant.updated_at),
            "archived_at": when(assistant.archived_at),
        }
        for assistant in mine
    ]


def snapshot_of_fields(assistant: Assistant) -> dict[str, Any]:
    return {
        "name": assistant.name,
        "description": assistant.description,
        "instructions": assistant.instructions,
        "model": assistant.model,
        "tools": None if assistant.all_tools else sorted(assistant.tool_names),
        "ask_before": sorted(assistant.ask_before),
        "use_memory": assistant.use_memory,
    }


def shared_links_of(user: User) -> list[dict[str, Any]]:
    """The links the person shared conversations by: whom for, when, how often opened."""
    links = (
        SharedLink.objects.filter(sharer=user)
        .order_by("pk")
        .select_related("group")
        .annotate(looks=Count("views"))
    )
    return [
        {
            "conversation_id": link.conversation_id,
            "audience": link.audience,
            "group": link.group.name if link.group else None,
            "include_files": link.include_files,
            "created_at": when(link.created_at),
            "revoked_at": when(link.revoked_at),
            "views": link.looks,
        }
        for link in links
    ]


def mcp_servers_of(user: User) -> list[dict[str, Any]]:
    """The person's own MCP servers and their tools; never a credential (those are sealed, and
    stay on the site): two queries."""
    servers = McpServer.objects.filter(owner=user).order_by("pk").prefetch_related("tools")
    return [
        {
            "name": server.name,
            "url": server.url,
            "prefix": server.prefix,
            "auth": server.auth,
            "created_at": when(server.created_at),
            "tools": [
                {"name": tool.name, "enabled": tool.enabled, "auto": tool.auto}
                for tool in server.tools.all()
            ],
        }
        for server in servers
    ]


def approvals_of(user: User) -> dict[str, Any]:
    """The person's approval choices (all off until they make one) and their grants: two
    queries."""
    chosen = ApprovalPreference.objects.filter(user=user).first()
    grants = ToolGrant.objects.filter(conversation__owner=user).order_by("pk")
    return {
        "ask_run_code": bool(chosen and chosen.ask_run_code),
        "ask_write_file": bool(chosen and chosen.ask_write_file),
        "ask_any_tool": bool(chosen and chosen.ask_any_tool),
        "always_allowed": [
            {
                "conversation": grant.conversation_id,
                "tool": grant.tool,
                "granted_at": when(grant.granted_at),
                "revoked_at": when(grant.revoked_at),
            }
            for grant in grants
        ],
    }


def conversation_name(conversation: Conversation) -> str:
    slug = slugify(conversation.title)[:SLUG_CHARS].strip("-") or "conversation"
    return f"conversations/{conversation.pk}-{slug}.json"


def conversation_of(conversation: Conversation, user: User) -> dict[str, Any]:
    """The conversation and its runs' transcripts, oldest first: two queries for its runs. Only
    the user's own runs, whatever else a conversation may come to hold."""
    return {
        "id": conversation.pk,
        "title": conversation.title,
        "instructions": conversation.instructions,
        "created_at": when(conversation.created_at),
        "updated_at": when(conversation.updated_at),
        "deleted_at": when(conversation.deleted_at),
        "runs": transcripts(conversation.runs.filter(user=user)),
    }


def loose_transcripts(user: User) -> Iterator[dict[str, Any]]:
    """The transcripts of the user's runs outside any conversation, a batch at a time, so a
    long history is never read whole."""
    ids = list(
        AgentRun.objects.filter(user=user, conversation__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for start in range(0, len(ids), LOOSE_RUNS_PER_BATCH):
        batch = ids[start : start + LOOSE_RUNS_PER_BATCH]
        yield from transcripts(AgentRun.objects.filter(pk__in=batch))


def memories_of(user: User) -> list[dict[str, Any]]:
    memories = Memory.objects.filter(owner=user).defer("embedding").order_by("pk")
    return [
        {
            "id": memory.pk,
            "text": memory.text,
            "origin": memory.origin,
            "stored_at": when(memory.created_at),
            "updated_at": when(memory.updated_at),
            "recall_count": memory.recall_count,
            "last_recalled_at": when(memory.last_recalled_at),
            "source_run_id": memory.source_run_id,
        }
        for memory in memories
    ]


def readme(user: User, skipped: list[str]) -> str:
    note = ""
    if skipped:
        listed = "".join(f"\n                      {escaped_name(name)}" for name in skipped)
        note = (
            "\n                    Not included: these are not plain files, could not be read"
            "\n                    (a symbolic link is never followed), or have names the Files"
            "\n                    panel refuses, which an unzip program could take for a path"
            "\n                    elsewhere (a backslash, a drive letter, or characters that"
            "\n                    read as one once converted: \uff0e\uff0e\uff3c reads ..\\), show"
            "\n                    as another name (control or bidirectional characters, shown"
            "\n                    here as \\x.. or \\u....), or are nested too deep or too long."
            "\n                    A folder listed here is left out with all it holds:" + listed
        )
    exported = timezone.now().strftime("%Y-%m-%d %H:%M UTC")
    return README.format(exported=exported, username=user.get_username(), skipped=note)


# The workspace, walked by file descriptor so that no symbolic link is ever followed ----------

# Non-blocking, so that a FIFO put there by a snippet cannot hang the export.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def write_workspace(archive: zipfile.ZipFile, workspace: Path) -> Generator[None, None, list[str]]:
    """Put each regular file of the workspace under files/, pausing after each chunk, and return
    the paths of what was left out: symbolic links, devices, FIFOs, sockets, names the zip
    cannot hold safely (a folder of such a name with all it holds), and a second file of a name
    already taken (names that are not UTF-8, or in another Unicode normal form, can read the
    same). The walk is iterative and goes no deeper than a path may be, so a tree of any depth
    costs a bounded stack; a workspace never made adds nothing."""
    try:
        root = os.open(workspace, DIRECTORY_FLAGS)
    except FileNotFoundError:
        return []
    skipped: list[str] = []
    named: set[str] = set()
    refused_folders: set[str] = set()
    try:
        for entry in walk(root, max_depth=MAX_PATH_DEPTH + 1):
            relative = shown(entry.relative)
            if posixpath.dirname(relative) in refused_folders:
                if entry.is_directory:
                    refused_folders.add(relative)
                continue
            if normal_name(relative) in named or not safe_in_zip(relative):
                skipped.append(relative)
                if entry.is_directory:
                    refused_folders.add(relative)
                continue
            named.add(normal_name(relative))
            if not entry.is_directory and not (yield from add_file(archive, entry, relative)):
                skipped.append(relative)
    finally:
        os.close(root)
    return sorted(skipped)


def safe_in_zip(relative: str) -> bool:
    """Whether the zip may name the file so: not too deep or long, by the Files panel's rules
    (workspace.browse), no backslash or drive letter an unzip program on Windows takes for a way
    out of the folder, no control or bidirectional character that makes it look like another
    name, and no character whose compatibility form (NFKC, or Windows' best-fit conversion)
    changes the path (fullwidth dots and reverse solidus read '..\\' there)."""
    if path_problem(relative) is not None:
        return False
    try:
        components(relative)
    except BrowseError:
        return False
    return True


def shown(path: str) -> str:
    """A path as the zip names it: bytes that are not UTF-8 become U+FFFD."""
    return os.fsencode(path).decode("utf-8", "replace")


def add_file(archive: zipfile.ZipFile, entry: Entry, relative: str) -> Generator[None, None, bool]:
    """Add one regular file, pausing after each chunk; False if it is not one (a link, a FIFO,
    a device) or cannot be opened. One gone since the walk listed it adds nothing."""
    if not stat.S_ISREG(entry.info.st_mode):
        return False
    try:
        handle = os.open(entry.name, _FILE, dir_fd=entry.parent)
    except FileNotFoundError:
        return True
    except OSError:  # swapped for a link since it was looked at, or unreadable
        return False
    with os.fdopen(handle, "rb") as source:
        opened = os.fstat(source.fileno())
        if not stat.S_ISREG(opened.st_mode):
            return False
        yield from copy_into(archive, source, f"files/{relative}", opened)
    return True


def copy_into(
    archive: zipfile.ZipFile, source: IO[bytes], name: str, opened: os.stat_result
) -> Iterator[None]:
    """Copy the file as it was when opened (no more than its size then) into the zip, stored,
    a chunk at a time."""
    entry = zipfile.ZipInfo(name, date_time=max(ZIP_EPOCH, time.gmtime(opened.st_mtime)[:6]))
    entry.compress_type = zipfile.ZIP_STORED
    remaining = opened.st_size
    large = remaining >= zipfile.ZIP64_LIMIT
    with archive.open(entry, "w", force_zip64=large) as target:
        while remaining > 0 and (chunk := source.read(min(CHUNK_BYTES, remaining))):
            target.write(chunk)
            remaining -= len(chunk)
            yield


# Deleting the account ------------------------------------------------------------------------


def delete_account(user: User, password: str) -> Deletion:
    """Delete `user`'s account, once their password is checked: their live runs are asked to
    stop first; then, in one transaction, their memories (each forgetting recorded, without its
    text), their conversations and the account go, and their runs, with their event logs and
    audit rows, pass to a new placeholder account; the workspace is deleted once that commits.

    A wrong password, or an operator's account, changes nothing (AccountNotDeleted)."""
    if not user.check_password(password):
        raise WrongPassword("That is not your password. Nothing was deleted.")
    if user.is_staff or user.is_superuser:
        raise AccountNotDeleted(
            "An operator's account is not deleted from here: the admin's log of what it did "
            "would go with it. Ask another operator to take your privileges away first."
        )
    cancelled = cancel_live_runs(user)
    workspace = workspace_path(user.pk)
    with transaction.atomic():
        hold_account(user)
        # A run started since the first pass (from another device) stops too; none can start
        # now that the account's row is held, and one waiting to start finds it gone.
        cancelled += cancel_live_runs(user, only_unasked=True)
        placeholder = make_placeholder()
        memories = len(forget(Memory.objects.filter(owner=user), by=user))
        anonymise_forgettings(user, placeholder)
        runs = hand_over_runs(user, placeholder)
        hand_over_charges(user, placeholder.get_username())
        conversations, _ = Conversation.objects.filter(owner=user).delete()
        anonymise_admin_log(user, placeholder)
        anonymise_logins(user, placeholder)
        user.delete()
        transaction.on_commit(lambda: remove_workspace(workspace))
    return Deletion(placeholder, cancelled, runs, memories, conversations)


def remove_workspace(workspace: Path) -> None:
    """Delete the workspace (iteratively, following no link), then any workspace a deleted
    account left behind before. Nothing here raises: the account is gone already, and its
    deletion is done whatever happens to the files; what cannot be removed is logged for an
    operator and tried again at the next deletion of any account."""
    remove_leaving_a_note(workspace)
    try:
        leftovers = leftover_workspaces()
    except Exception:
        logger.exception("Looking for deleted accounts' workspaces left on disk failed")
        return
    for leftover in leftovers:
        remove_leaving_a_note(leftover)


def remove_leaving_a_note(workspace: Path) -> None:
    """Remove the workspace and its runs' fences (sandbox/fence.py: ids and attempts only)."""
    for directory in (workspace, fence_directory(workspace)):
        try:
            remove_tree(directory)
        except Exception:
            logger.exception("Deleted account's workspace %s: removing it failed", directory)
        if os.path.lexists(directory):
            logger.error("Deleted account's workspace %s is still on disk, in part", directory)


def leftover_workspaces() -> list[Path]:
    """The workspaces of accounts that no longer exist (ids are never used again), which a
    removal that failed, or a cancelled run still saving its files, left behind."""
    root = settings.LOOP_WORKSPACES_DIR
    try:
        found = {int(name): root / name for name in os.listdir(root) if is_an_id(name)}
    except FileNotFoundError:
        return []
    users = get_user_model().objects.filter(pk__in=found).values_list("pk", flat=True)
    return [found[pk] for pk in sorted(found.keys() - set(users))]


def is_an_id(name: str) -> bool:
    return name.isascii() and name.isdecimal()


def hold_account(user: User) -> None:
    """Lock the account's row to the transaction's end against starting a run and remembering
    (both lock it first), so no run starts meanwhile; an account already gone (deleted from
    another device at the same time) is refused, and nothing more is made or changed. A lock
    short of a key lock: a worker taking up a continued run of the account, which holds the run
    and then names its asker, does not wait on it while the deletion waits on the run."""
    users = get_user_model().objects
    if not users.select_for_update(no_key=True).filter(pk=user.pk).exists():
        raise AccountNotDeleted("This account is already deleted.")


def cancel_live_runs(user: User, *, only_unasked: bool = False) -> int:
    """Ask each run still queued or running to stop, deleted conversations' included: a queued
    one ends at once, a running one within a second and, cancelled, remembers nothing.
    `only_unasked` leaves out the running ones already asked."""
    live = AgentRun.objects.filter(user=user).exclude(status__in=FINISHED)
    if only_unasked:
        live = live.filter(cancel_requested_at__isnull=True)
    runs = list(live)
    for run in runs:
        request_cancel(run)
    return len(runs)


def make_placeholder() -> User:
    """An account of its own for one deleted account's runs: inactive, with no usable password,
    and a last login (the deletion's time), so it is never taken for a sign-up waiting for an
    operator's approval."""
    users = get_user_model()
    while True:
        name = PLACEHOLDER_PREFIX + secrets.token_hex(PLACEHOLDER_HEX // 2)
        if not users.objects.filter(username=name).exists():
            break
    placeholder = users(username=name, is_active=False, last_login=timezone.now())
    placeholder.set_unusable_password()
    placeholder.save()
    return placeholder


def hand_over_runs(user: User, placeholder: User) -> int:
    """The runs, their logs and audit rows stay, the placeholder's and in no conversation; who
    asked a continue stays right (the owner is the placeholder now)."""
    runs = AgentRun.objects.filter(user=user)
    AgentRun.objects.filter(continue_requested_by=user).update(continue_requested_by=placeholder)
    RunResume.objects.filter(requested_by=user).update(requested_by=placeholder)
    return runs.update(user=placeholder, conversation=None)


def anonymise_forgettings(user: User, placeholder: User) -> None:
    """Every forgetting record that names the person names the placeholder instead, and those
    of the person's memories keep no text, whatever LOOP_FORGOTTEN_TEXT_DAYS says."""
    name = placeholder.get_username()
    ForgottenMemory.objects.filter(owner=user).update(
        owner=placeholder, owner_name=name, text=NOT_KEPT
    )
    ForgottenMemory.objects.filter(forgotten_by=user).update(
        forgotten_by=placeholder, forgotten_by_name=name
    )


def anonymise_admin_log(user: User, placeholder: User) -> None:
    """Operators' log entries about the account (approving the sign-up, say, which the admin logs
    under a proxy of the user model) stay, about the placeholder."""
    concrete = get_user_model()
    kinds = [
        ContentType.objects.get_for_model(model, for_concrete_model=False)
        for model in apps.get_models()
        if model._meta.concrete_model is concrete
    ]
    LogEntry.objects.filter(content_type__in=kinds, object_id=str(user.pk)).update(
        object_id=str(placeholder.pk), object_repr=placeholder.get_username()
    )


def anonymise_logins(user: User, placeholder: User) -> None:
    """django-axes' records of the account's logins and failed attempts (time, address, browser)
    stay for the operators' security audit, under the placeholder's name."""
    name, placeholder_name = user.get_username(), placeholder.get_username()
    for model in (AccessLog, AccessAttempt, AccessFailureLog):
        model.objects.filter(username=name).update(username=placeholder_name)
