"""The records of tool calls that wait for a person's decision (core.approval): each call
asked about and what became of it (the audit row), the site's policy as staff set it, a
person's own choices, and the tools a person allowed for one conversation. Their tables keep
the names they had when the agent app held them (`agent_approvalrequest`, ...)."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

from agent.models import Alongside
from core.events import ApprovalRequested, Decision
from core.llm import CALL_ID_CHARS, TOOL_NAME_CHARS


class DecisionChoice(models.TextChoices):
    """core.events.Decision as the audit row stores it ("" while the call waits)."""

    APPROVE = Decision.APPROVE.value, "Approve"
    EDIT = Decision.EDIT.value, "Edit"
    DENY = Decision.DENY.value, "Deny"
    EXPIRED = Decision.EXPIRED.value, "Expired"
    CANCELLED = Decision.CANCELLED.value, "Cancelled"


# An audit row's decision while its call waits for one.
WAITING = ""


class Via(models.TextChoices):
    """Where a call was decided; "" (no choice) for Loop's own decisions (an expiry, a Stop)."""

    WEB = "web", "The chat page"
    TERMINAL = "terminal", "The terminal (runagent)"
    CONSOLE = "console", "The console"
    API = "api", "The API (a program with the person's key)"


def approval_window() -> timedelta:
    """How long a call may wait for its decision (LOOP_APPROVAL_SECONDS)."""
    return timedelta(seconds=settings.LOOP_APPROVAL_SECONDS)


def deadline_after(asked_at: datetime) -> datetime:
    """When a call asked about at `asked_at` may no longer be decided: past it, it never runs."""
    return asked_at + approval_window()


class ApprovalRequest(models.Model):
    """A call that asked for its run's person's decision, and the decision: one row per call,
    written with its ApprovalRequested event (agent/recorder.py) and decided once
    (approvals/decisions.py), the audit of who decided what, when, on which exact call
    (`digest`)."""

    run = models.ForeignKey("agent.AgentRun", on_delete=models.CASCADE, related_name="approvals")
    seq = models.PositiveIntegerField()  # its ApprovalRequested's in the run's log
    step = models.PositiveIntegerField()
    call_id = models.CharField(max_length=CALL_ID_CHARS)
    tool = models.CharField(max_length=TOOL_NAME_CHARS)
    arguments = models.TextField()  # as the model proposed them
    digest = models.CharField(max_length=64)
    why = models.CharField(max_length=200, blank=True)  # whose rule asked
    created_at = models.DateTimeField(auto_now_add=True)
    decision = models.CharField(
        max_length=16, choices=DecisionChoice.choices, blank=True, default=WAITING
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Where it was decided: the chat page, the terminal (runagent), the console; "" for Loop's
    # own (an expiry, a Stop).
    decided_via = models.CharField(max_length=16, choices=Via.choices, blank=True, default="")
    # Decided through the API: the key's prefix and name (its scopes are on the run's page).
    decided_key = models.CharField(max_length=120, blank=True, default="")
    edited_arguments = models.TextField(blank=True, default="")
    reason = models.TextField(blank=True, default="")

    class Meta:
        db_table = "agent_approvalrequest"
        ordering = ("run", "seq")
        permissions = (("decide_for_others", "May approve tool calls on a person's behalf"),)
        constraints = (
            models.UniqueConstraint(fields=["run", "call_id"], name="approval_request_call_unique"),
        )
        indexes = (
            models.Index(
                fields=["created_at"], name="approval_waiting_idx", condition=Q(decision=WAITING)
            ),
        )

    def __str__(self) -> str:
        return f"{self.tool} in run {self.run_id} step {self.step}: {self.decision or 'waiting'}"

    @property
    def waiting(self) -> bool:
        return not self.decision

    @property
    def deadline(self) -> datetime:
        return deadline_after(self.created_at)

    def expired(self, now: datetime) -> bool:
        """Past its deadline at `now`: no decision may be taken on it any more."""
        return self.deadline < now


class ApprovalMode(models.TextChoices):
    AUTO = "auto", "Runs without asking"
    ASK = "ask", "Asks first"


class SiteToolPolicy(models.Model):
    """The site's rule for one tool, as staff set it in the console: it overrides LOOP_APPROVAL
    for that tool. A person may ask for more, never for less."""

    tool = models.CharField(max_length=TOOL_NAME_CHARS, unique=True)
    mode = models.CharField(max_length=8, choices=ApprovalMode.choices)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        db_table = "agent_sitetoolpolicy"
        verbose_name = "site tool policy"
        verbose_name_plural = "site tool policies"
        ordering = ("tool",)

    def __str__(self) -> str:
        return f"{self.tool}: {self.mode}"


class ApprovalPreference(models.Model):
    """What a person asked to decide before it runs, on top of what the site requires."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="approval_preference"
    )
    ask_run_code = models.BooleanField(default=False)
    ask_write_file = models.BooleanField(default=False)
    ask_any_tool = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "agent_approvalpreference"

    def __str__(self) -> str:
        return f"Approval choices of user {self.user_id}"


class ToolGrant(models.Model):
    """ "Always allow <tool> in this conversation": its later calls run without asking the
    person (never those the site requires asking about). Revoked, it stays as a record. An MCP
    tool's grant is bound to its server, and goes with it: another server given the same prefix
    later does not inherit it."""

    conversation = models.ForeignKey(
        "agent.Conversation", on_delete=models.CASCADE, related_name="tool_grants"
    )
    tool = models.CharField(max_length=TOOL_NAME_CHARS)
    server = models.ForeignKey(
        "mcp_servers.McpServer",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="The MCP server whose tool was allowed; empty for Loop's own tools.",
    )
    granted_at = models.DateTimeField(auto_now_add=True)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agent_toolgrant"
        ordering = ("conversation", "tool")
        constraints = (
            models.UniqueConstraint(
                fields=["conversation", "tool"],
                condition=Q(revoked_at__isnull=True),
                name="tool_grant_live_unique",
            ),
        )

    def __str__(self) -> str:
        return f"{self.tool} allowed in conversation {self.conversation_id}"


def request_row(run_id: int, event: ApprovalRequested, seq: int) -> Alongside:
    """The row a call waiting for its person's decision adds, written with its event (the
    recorder's `write_request_rows`): the row the decision is made on, ordered as its request in
    the log (a reply's calls in the model's order)."""
    return Alongside(
        ApprovalRequest,
        {
            "run_id": run_id,
            "seq": seq,
            "step": event.step,
            "call_id": event.call_id,
            "tool": event.tool,
            "arguments": event.arguments,
            "digest": event.digest,
            "why": event.why[:200],
        },
    )
