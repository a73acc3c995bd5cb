"""A group's rights, its servers or a person's groups changed: rights read earlier in the same
request are read again (rights.effective.forget_read)."""

from typing import Any

from django.contrib.auth.models import User
from django.db.models.signals import m2m_changed, post_delete, post_save

from rights.effective import forget_read
from rights.models import GroupRights


def changed(**kwargs: Any) -> None:
    forget_read()


def connect() -> None:
    for signal in (post_save, post_delete):
        signal.connect(changed, sender=GroupRights, dispatch_uid=f"rights-{signal}")
    m2m_changed.connect(
        changed, sender=GroupRights.mcp_servers.through, dispatch_uid="rights-servers"
    )
    m2m_changed.connect(changed, sender=User.groups.through, dispatch_uid="rights-groups")
