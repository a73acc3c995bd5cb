"""A person's settings: /settings/approvals/, which tool calls wait for their decision, and
/settings/instructions/, how Loop should answer them, and /settings/theme/, light or dark."""

from django.urls import path

from accounts import approvals, instructions, theme

urlpatterns = [
    path("approvals/", approvals.approval_settings, name="approval_settings"),
    path("approvals/revoke/", approvals.revoke, name="approval_revoke"),
    path("instructions/", instructions.instruction_settings, name="instruction_settings"),
    path("theme/", theme.choose, name="theme"),
]
