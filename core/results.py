"""What a tool call came to, as the loop, its history and its events know it: a status and a text,
and the facts a card shows without reading the text (the files it saved, what its person must
do before it works again). The tools (tools.base) make these; the loop only reads them."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ToolStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    DENIED = "denied"
    # Never ran: the run was cancelled or halted before this call's turn came.
    SKIPPED = "skipped"
    # Started, but the worker running it stopped before it finished: whether it completed (and
    # what it changed) is unknown. Recorded when the run is resumed from its log.
    INTERRUPTED = "interrupted"


class Remedy(StrEnum):
    """What the person must do before a tool that failed can work again (None: nothing they
    can do): a fact the tool states, so a card offers the way without reading its text."""

    RECONNECT = "reconnect"  # sign in to the tool's server again (its OAuth grant was lost)
    # Its tool is on hold: its server changed the tool's definition since it was reviewed, and
    # the change waits for its reviewer (the person, or for a site's server an operator).
    REVIEW = "review"


# What the model (and a person) is told of a call that may or may not have done its work: its
# worker stopped mid-call, or the connection to an outside server dropped once the call was sent.
UNKNOWN_OUTCOME = "it is unknown whether it completed"


@dataclass(frozen=True)
class ToolResult:
    status: ToolStatus
    text: str
    duration: float
    policy: str = ""
    truncated: bool = False
    # It failed because the run was stopped while it ran (a snippet killed by Stop): a person
    # sees it as stopped, not as an error. The model reads it as the failure it is.
    stopped: bool = False
    remedy: Remedy | None = None
    # The files it saved in its person's workspace, as workspace paths (an MCP answer's images,
    # mcp_servers.results): a card shows them from here, never from the text.
    saved: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "text": self.text,
            "duration": round(self.duration, 6),
            "policy": self.policy,
            "truncated": self.truncated,
            "saved": list(self.saved),
        }
