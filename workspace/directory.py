"""Each user's workspace: the one directory their file tools and run_code snippets may touch."""

import os
import stat
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from tools.base import ToolContext
from tools.sandbox import Identity, sandbox_identity
from workspace import paths


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


def context_for(user: AbstractBaseUser) -> ToolContext:
    """The context tools act in for this user: decided here, by server code, never by the model."""
    return ToolContext(
        user_id=user.pk,
        username=user.get_username(),
        workspace=ensure_workspace(workspace_path(user.pk), user.pk),
    )
