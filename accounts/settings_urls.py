"""A person's settings: /settings/approvals/, which tool calls wait for their decision, and
/settings/theme/, light or dark."""

from django.urls import path

from accounts import approvals, theme

urlpatterns = [
    path("approvals/", approvals.approval_settings, name="approval_settings"),
    path("approvals/revoke/", approvals.revoke, name="approval_revoke"),
    path("theme/", theme.choose, name="theme"),
]
