"""Whom a tool call acts for, built by server code from the person a run (or a command) is for."""

from django.contrib.auth.models import User

from tools.base import ToolContext
from workspace.directory import workspace_of


def context_for(user: User) -> ToolContext:
    """The context tools act in for this user: decided here, by server code, never by the model."""
    return ToolContext(user_id=user.pk, username=user.get_username(), workspace=workspace_of(user))
