"""Each user's workspace: the one directory their file tools and run_code snippets may touch."""

import os
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from tools.base import ToolContext
from tools.sandbox import sandbox_identity


def workspace_path(user_id: int) -> Path:
    return settings.LOOP_WORKSPACES_DIR / str(user_id)


def ensure_workspace(path: Path) -> Path:
    """Create the workspace, private to the identity that runs snippets.

    The parent is traversable but not listable (0711), so a sandbox reaches its own workspace
    without learning which others exist.
    """
    path.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    path.parent.chmod(0o711)
    path.mkdir(mode=0o700, exist_ok=True)
    identity = sandbox_identity()
    if identity is not None and os.geteuid() == 0:
        os.chown(path, identity.uid, identity.gid)
    return path


def context_for(user: AbstractBaseUser) -> ToolContext:
    """The context tools act in for this user: decided here, by server code, never by the model."""
    return ToolContext(
        user_id=user.pk,
        username=user.get_username(),
        workspace=ensure_workspace(workspace_path(user.pk)),
    )
