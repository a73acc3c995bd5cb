"""Each user's workspace: the one directory their file tools and run_code snippets may touch."""

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from workspace import paths

# Sandbox uids stay below 2**31 - 1: some tools read uids as signed 32-bit numbers.
UID_CEILING = 2**31 - 1


class UidOutOfRange(ImproperlyConfigured):
    """LOOP_SANDBOX_UID_BASE puts a person's uid at root's or past UID_CEILING: the site's
    setting is wrong, and no workspace can be handed to that person's snippets."""


@dataclass(frozen=True)
class Identity:
    """The host uid and gid snippets run as: numbers only, no /etc/passwd entry needed."""

    uid: int
    gid: int


def sandbox_identity(user_id: int) -> Identity | None:
    """Whom this user's snippets run as when the worker is root: a host uid of their own, so no
    other user's snippets count against their process limit. None when the worker is not root:
    then every snippet runs as the worker's own unprivileged uid."""
    if os.geteuid() != 0:
        return None
    uid = settings.LOOP_SANDBOX_UID_BASE + user_id
    if not 0 < settings.LOOP_SANDBOX_UID_BASE <= uid < UID_CEILING:
        raise UidOutOfRange(
            f"run_code cannot run: user {user_id}'s sandbox uid would be {uid}, outside "
            f"1..{UID_CEILING - 1}. Set LOOP_SANDBOX_UID_BASE (now "
            f"{settings.LOOP_SANDBOX_UID_BASE}) so that it plus the highest user id stays in range."
        )
    return Identity(uid, uid)


def workspace_path(user_id: int) -> Path:
    return settings.LOOP_WORKSPACES_DIR / str(user_id)


def ensure_workspace(path: Path, user_id: int) -> Path:
    """Create the workspace, private to the identity that runs this user's snippets.

    The parent is traversable but not listable (0711), so a sandbox reaches its own workspace
    without learning which others exist. A workspace another identity owns (the one sandbox user
    all snippets shared before each user had a uid of their own) is handed over first.
    """
    path.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    path.parent.chmod(0o711)
    path.mkdir(mode=0o700, exist_ok=True)
    identity = sandbox_identity(user_id)
    if identity is not None and os.stat(path).st_uid != identity.uid:
        hand_over(path, identity)
    return path


def hand_over(path: Path, identity: Identity) -> None:
    """Give identity what the workspace's present owner owns in it, the workspace itself last
    (so an interrupted hand-over is finished on the next use).

    Nothing is followed: symlinks are changed themselves, and a file with other hard links may
    be a name for something outside the workspace, so it is left as it is. The walk is
    iterative (workspace.paths), so a tree of any depth is handed over whole.
    """
    previous = os.stat(path).st_uid
    root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for entry in paths.walk(root):
            info = entry.info
            linked_elsewhere = not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1
            if info.st_uid == previous and not linked_elsewhere:
                owner = (identity.uid, identity.gid)
                os.chown(entry.name, *owner, dir_fd=entry.parent, follow_symlinks=False)
        os.fchown(root, identity.uid, identity.gid)
    finally:
        os.close(root)


def workspace_of(user: User) -> Path:
    """The person's workspace, made (and handed to their sandbox uid) if it is not yet."""
    return ensure_workspace(workspace_path(user.pk), user.pk)
