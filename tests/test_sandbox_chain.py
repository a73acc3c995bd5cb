"""The chain that starts a sandbox: sandbox/overlay.py sets the process budget before any user
namespace, then, once it has forked the saver, enters the snippet's program cgroup and sets the
snippet's limits itself (no `prlimit` or shell step of their own). So the snippet runs under every
limit, hard and soft, in program/, and the saver under the process budget only, in launch/."""

import re
import resource
from pathlib import Path

import psutil
import pytest

from sandbox.cgroups import Tree
from sandbox.interpreter import _site_packages
from sandbox.policies import Limits, snippet_rlimits
from tools.code import parse_report

from .conftest import wait_for
from .sandboxes import SANDBOX, bubblewrap
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
    sandbox = bubblewrap().launch(context.workspace, limits).result()
    try:
        saver = saver_of(sandbox)
        bwrap = psutil.Process(sandbox.process.pid)
        bound = {number: (str(value), str(value)) for number, value in expected(limits).items()}
        # The launch answers once the chain is started; its steps set the limits as they go,
        # before bwrap execs, so a busy machine may show them a moment later.
        wait_for(lambda: limits_of(bwrap.pid) == bound, "bwrap to hold the run's limits", 30)
        savers = limits_of(saver.pid)
        assert savers[resource.RLIMIT_NPROC] == bound[resource.RLIMIT_NPROC]
        for number in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE):
            assert savers[number] != bound[number]
        if isinstance(SANDBOX.cgroups.state(), Tree):  # where the machine gives memory cgroups
            assert memory_cgroup_of(bwrap.pid).endswith("/program")
            assert memory_cgroup_of(saver.pid).endswith("/launch")
    finally:
        sandbox.discard()


@pytest.mark.parametrize("given", ["", "7=64", "7=64,4=0"])
def test_the_overlay_reads_its_limits_as_resource_value_pairs(given):
    from sandbox.overlay import _options

    positional, options, command = _options(
        ["/w", "1", "2", "/f", "5", "--limits", given, "--cgroup", "/c", "--", "bwrap", "-x"]
    )
    assert positional == ["/w", "1", "2", "/f", "5"]
    assert options == {"limits": given, "cgroup": "/c"}
    assert command == ["bwrap", "-x"]


def test_the_snippet_runs_as_python3_reading_stdin_would_without_the_site_module(workspaces):
    """Its interpreter starts with -S (sandbox.interpreter.SNIPPET_MAIN): the program still runs as
    __main__ from "<stdin>", with exit(), quit() and the system's dist-packages."""
    context = user_context(workspaces)
    code = (
        "import __main__, pickle, sys\n"
        "class Kept: pass\n"
        "print(__name__, __main__.__file__, sys.argv, len(pickle.dumps(Kept())) > 0)\n"
        "print(sorted(name for name in globals() if not name.startswith('__')))\n"
        f"print([path for path in sys.path if path in {list(site_packages())!r}])\n"
        "exit(3)\n"
    )
    report = parse_report(run(context, code).text)
    assert report is not None
    assert report.exit_status == 3
    assert report.stdout.splitlines() == [
        "__main__ <stdin> ['-'] True",
        "['Kept', 'pickle', 'sys']",  # nothing of SNIPPET_MAIN's own
        repr(list(site_packages())),
    ]


def test_an_uncaught_exception_shows_the_programs_frames_only(workspaces):
    report = parse_report(run(user_context(workspaces), "def f():\n    1 / 0\nf()\n").text)
    assert report is not None
    assert report.exit_status == 1
    assert report.stderr.splitlines() == [
        "Traceback (most recent call last):",
        '  File "<stdin>", line 3, in <module>',
        '  File "<stdin>", line 2, in f',
        "ZeroDivisionError: division by zero",
    ]
    broken = parse_report(run(user_context(workspaces), "print(1 /)\n").text)
    assert broken is not None
    assert broken.stderr.startswith('  File "<stdin>", line 1\n')
    assert broken.stderr.rstrip().endswith("SyntaxError: invalid syntax")


def site_packages() -> tuple[str, ...]:
    from django.conf import settings

    paths = _site_packages(settings.LOOP_SANDBOX_PYTHON)
    assert paths is not None
    return paths
