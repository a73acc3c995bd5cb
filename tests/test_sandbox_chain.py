"""The chain that starts a sandbox: tools/overlay.py sets the process budget before any user
namespace, then, once it has forked the saver, enters the snippet's program cgroup and sets the
snippet's limits itself (no `prlimit` or shell step of their own). So the snippet runs under every
limit, hard and soft, in program/, and the saver under the process budget only, in launch/."""

import re
import resource
from pathlib import Path

import psutil
import pytest

from tools.cgroups import MEMORY, Tree
from tools.sandbox import BubblewrapSandbox, Limits, snippet_rlimits

from .test_run_code import run, user_context
from .test_saver_fence import saver_of

NAMES = ("CPU", "AS", "FSIZE", "NOFILE", "CORE", "NPROC")
# How /proc/PID/limits names each of them.
SHOWN = {
    resource.RLIMIT_CPU: "Max cpu time",
    resource.RLIMIT_AS: "Max address space",
    resource.RLIMIT_FSIZE: "Max file size",
    resource.RLIMIT_NOFILE: "Max open files",
    resource.RLIMIT_CORE: "Max core file size",
    resource.RLIMIT_NPROC: "Max processes",
}


def expected(limits: Limits) -> dict[int, int]:
    return {**snippet_rlimits(limits), resource.RLIMIT_NPROC: limits.max_processes}


def limits_of(pid: int) -> dict[int, tuple[str, str]]:
    """A process's limits (soft, hard) as /proc shows them ("unlimited" or a number)."""
    text = Path(f"/proc/{pid}/limits").read_text()
    found = {}
    for number, label in SHOWN.items():
        soft, hard = re.search(rf"^{label}\s+(\S+)\s+(\S+)", text, re.M).groups()
        found[number] = (soft, hard)
    return found


def memory_cgroup_of(pid: int) -> str:
    """The process's memory cgroup path (v2: the unified one)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    fields = [line.split(":", 2) for line in lines]
    v1 = [path for _, controllers, path in fields if "memory" in controllers.split(",")]
    return v1[0] if v1 else next(path for number, _, path in fields if number == "0")


def test_the_snippet_runs_under_each_of_its_limits_hard_and_soft(workspaces):
    code = (
        "import resource\n"
        f"for name in {NAMES!r}:\n"
        "    print(name, *resource.getrlimit(getattr(resource, 'RLIMIT_' + name)))\n"
    )
    result = run(user_context(workspaces), code)
    assert result.ok, result.text
    seen = {
        getattr(resource, f"RLIMIT_{name}"): (int(soft), int(hard))
        for name, soft, hard in re.findall(r"^([A-Z]+) (-?\d+) (-?\d+)$", result.text, re.M)
    }
    assert seen == {
        number: (value, value) for number, value in expected(Limits.from_settings(10)).items()
    }


def test_the_saver_has_the_process_budget_only_and_stays_out_of_the_program_cgroup(workspaces):
    context = user_context(workspaces)
    limits = Limits.from_settings(10)
    sandbox = BubblewrapSandbox().launch(context.workspace, limits).result()
    try:
        saver = saver_of(sandbox)
        bwrap = psutil.Process(sandbox.process.pid)
        bound = {number: (str(value), str(value)) for number, value in expected(limits).items()}
        assert limits_of(bwrap.pid) == bound
        savers = limits_of(saver.pid)
        assert savers[resource.RLIMIT_NPROC] == bound[resource.RLIMIT_NPROC]
        for number in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE):
            assert savers[number] != bound[number]
        if isinstance(MEMORY.state(), Tree):  # where the machine gives memory cgroups
            assert memory_cgroup_of(bwrap.pid).endswith("/program")
            assert memory_cgroup_of(saver.pid).endswith("/launch")
    finally:
        sandbox.discard()


@pytest.mark.parametrize("given", ["", "7=64", "7=64,4=0"])
def test_the_overlay_reads_its_limits_as_resource_value_pairs(given):
    from tools.overlay import _options

    positional, options, command = _options(
        ["/w", "1", "2", "/f", "5", "--limits", given, "--cgroup", "/c", "--", "bwrap", "-x"]
    )
    assert positional == ["/w", "1", "2", "/f", "5"]
    assert options == {"limits": given, "cgroup": "/c"}
    assert command == ["bwrap", "-x"]
