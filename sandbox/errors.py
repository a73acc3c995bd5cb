"""Why a snippet could not run: the sandbox cannot start here, or its uid's process budget is
spent. Plain exceptions (the sandbox is below the tools); run_code (tools/code.py) says them to
the model as a refused call and as a failed one."""

import logging

logger = logging.getLogger(__name__)


class SandboxError(Exception):
    """A snippet could not run; `policy` names the sandbox that refused it."""

    def __init__(self, message: str, *, policy: str = "") -> None:
        super().__init__(message)
        self.policy = policy


class SandboxUnavailable(SandboxError):
    """The configured sandbox cannot run here. What the model reads, and the person on its card,
    says so in plain words, for there is nothing either can do about it; why and how to fix it
    (`detail`: a package, a sysctl, a setting) is the operator's, in the worker's log and in
    `manage.py sandboxcheck` and the system checks."""

    SAID = (
        "run_code is not available on this site right now: the sandbox it runs code in cannot "
        "start. Nothing you do can fix that, and its operators see why. Do not call run_code "
        "again in this run; answer with what you can do without running code."
    )

    def __init__(self, detail: str) -> None:
        super().__init__(self.SAID)
        self.detail = detail
        logger.error("run_code's sandbox cannot run: %s", detail)


class ProcessLimitReached(SandboxError):
    """The snippets of one uid hold every process their budget allows; the next must wait."""
