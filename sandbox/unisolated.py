"""The sandbox without isolation (LOOP_SANDBOX=subprocess): rlimits, cgroups and a timeout,
nothing more."""

from pathlib import Path

from sandbox.cgroups import MemoryCgroups
from sandbox.chain import identity_prefix, memory_cgroup, memory_prefixes, raise_if_memory_refused
from sandbox.interpreter import interpreter_arguments
from sandbox.launcher import Launcher
from sandbox.policies import Limits, limits_prefix, process_budget_prefix
from sandbox.process import RunningSnippets
from sandbox.snippet import Execution, ForRun


class SubprocessSandbox:
    """Opt-in only (LOOP_SANDBOX=subprocess): rlimits and a timeout, but no isolation at all."""

    policy = "subprocess (no isolation)"

    def __init__(
        self, launcher: Launcher, cgroups: MemoryCgroups, running: RunningSnippets
    ) -> None:
        self.launcher, self.cgroups, self.running = launcher, cgroups, running

    def run(
        self,
        code: str,
        workspace: Path,
        limits: Limits,
        *,
        start_next: bool = True,
        run: ForRun | None = None,
    ) -> Execution:
        memory = memory_cgroup(workspace, limits, self.cgroups)
        into_launch, into_program = memory_prefixes(memory)
        argv = [
            *into_launch,
            *identity_prefix(workspace),
            *process_budget_prefix(limits),
            *into_program,
            *limits_prefix(limits),
            *interpreter_arguments(),
        ]
        launched = self.launcher.start(argv, limits, workspace, memory=memory).result()
        execution = launched.finish(code, limits, self.policy, run=run, running=self.running)
        raise_if_memory_refused(execution)
        return execution
