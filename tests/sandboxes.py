"""The tests' sandboxes: one host for the session, as a worker owns its own, which the tests'
direct tool calls hand run_code (conftest drains it after each test and closes it at the end)."""

from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.host import SandboxHost

SANDBOX = SandboxHost()


def bubblewrap() -> BubblewrapSandbox:
    """The bubblewrap sandbox of the tests' host, whatever LOOP_SANDBOX says."""
    return BubblewrapSandbox(SANDBOX.launcher, SANDBOX.pool, SANDBOX.cgroups, SANDBOX.running)
