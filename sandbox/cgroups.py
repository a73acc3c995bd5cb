"""Bound the memory of each snippet, and of each person's snippets together, with cgroups.

The memory controller of cgroup v2 where the machine has it, of v1 where it has only that. Under
the base (LOOP_SANDBOX_CGROUP, by default the memory cgroup this process is in) Loop makes these,
and touches nothing else on the host:

    loop-sandbox/
        person-<uid>/                  a person's snippets together: LOOP_SANDBOX_PERSON_MEMORY_MB
            snippet-<pid>-<host>-<n>/  one sandbox, removed after it (its person's too, when idle)
                launch/                the chain up to the sandbox, and the quota's saver it leaves
                program/               the sandbox, all its processes: LOOP_SANDBOX_MEMORY_MB

The kernel charges a page to the cgroup of the process that first touched it, tmpfs pages too, so
what a snippet keeps in /tmp or writes into its workspace's overlay counts against program/ (and,
while the saver saves it, against the person). The saver is kept out of program/: a snippet at its
bound must neither get the saver killed nor starve it of the memory it saves with. Each process
moves itself in by a tiny step of the chain (`enter_prefix`; the quota's overlay, which runs as
that step anyway, enters program/ itself) before anything of the snippet runs.
A snippet over its bound meets the kernel's OOM killer inside program/ (v2 kills all of program/
at once, v1 its largest processes one by one); `SnippetCgroup.release` says so afterwards.

Where no cgroup can be made (not root and nothing delegated, no memory controller, a directory
that is not a cgroup or not writable), `MemoryCgroups.snippet` returns None and each sandbox
process keeps only its RLIMIT_AS: logged once per host, and reported by the tools.W003 system
check.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import select
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from django.conf import settings

from sandbox.overlay import REFUSED

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
TREE = "loop-sandbox"
# REFUSED: what a refused step says. bwrap reports its own failures as "bwrap: ..."; the sandbox
# fails closed on them alike. sandbox/overlay.py says it too, as it enters the program cgroup
# itself.
# Writes the shell's own pid (the process that then becomes "$@") into the cgroup.procs file $1.
ENTER = f'{{ echo $$ >"$1"; }} 2>/dev/null || {{ echo "{REFUSED}" >&2; exit 1; }}; shift; exec "$@"'
# How long `release` waits for a cgroup's processes to end: by then they are dying (the sandbox's
# pid namespace went down with it) or the saver, which has handed back the output already.
DRAIN_SECONDS = 10.0
CHARGE_BATCH = 64 * 4096  # the kernel charges a cgroup up to this much ahead (MEMCG_CHARGE_BATCH)

Bound = Literal["snippet", "person"]


class NoCgroup(Exception):
    """Why no memory cgroup can be used here."""


class CgroupError(OSError):
    """Cgroups can be used here, but one for a snippet could not be made."""


class Version(Protocol):
    name: str

    def open_base(self, directory: Path) -> None: ...

    def open_for_children(self, directory: Path) -> None: ...

    def bound(self, directory: Path, limit_bytes: int) -> None: ...

    def arm_oom_killer(self, directory: Path) -> None: ...

    def entry_files(self, snippet: Path) -> list[Path]: ...

    def oom_kills(self, directory: Path) -> int: ...

    def reached_limit(self, directory: Path) -> bool: ...


class V2:
    """cgroup v2: memory.max, no swap past it, and an OOM kill takes all of the snippet."""

    name = "cgroup v2"

    def open_base(self, directory: Path) -> None:
        """loop-sandbox/ gets the memory controller only if its parent gives it."""
        self.open_for_children(directory)

    def open_for_children(self, directory: Path) -> None:
        """Delegate the memory controller to the children. The kernel refuses (EBUSY) while the
        cgroup itself holds processes."""
        if "memory" not in (directory / "cgroup.subtree_control").read_text().split():
            _write(directory / "cgroup.subtree_control", "+memory")

    def bound(self, directory: Path, limit_bytes: int) -> None:
        _write(directory / "memory.max", str(limit_bytes))
        if (directory / "memory.swap.max").exists():
            _write(directory / "memory.swap.max", "0")

    def arm_oom_killer(self, directory: Path) -> None:
        _write(directory / "memory.oom.group", "1")

    def entry_files(self, snippet: Path) -> list[Path]:
        """Moving from launch/ to program/ takes write access to their common parent's
        cgroup.procs too (which holds no process: it has children with the controller)."""
        return [snippet / "cgroup.procs", snippet / "program" / "cgroup.procs"]

    def oom_kills(self, directory: Path) -> int:
        return _field(directory / "memory.events", "oom_kill")

    def reached_limit(self, directory: Path) -> bool:
        return _field(directory / "memory.events", "oom") > 0


class V1:
    """cgroup v1: memory.limit_in_bytes, and memory.memsw.limit_in_bytes (memory and swap
    together) where swap is accounted, in a hierarchy (memory.use_hierarchy)."""

    name = "cgroup v1"

    def open_base(self, directory: Path) -> None:
        """Nothing to change in the base: loop-sandbox/'s own use_hierarchy holds below it."""

    def open_for_children(self, directory: Path) -> None:
        hierarchy = directory / "memory.use_hierarchy"
        if hierarchy.read_text().strip() != "1":  # else a child's charges pass its parent's limit
            _write(hierarchy, "1")

    def bound(self, directory: Path, limit_bytes: int) -> None:
        memory = directory / "memory.limit_in_bytes"
        both = directory / "memory.memsw.limit_in_bytes"
        files = [memory, both] if both.exists() else [memory]
        if limit_bytes > int(memory.read_text()):
            files.reverse()  # the kernel keeps memory and swap together at least the memory limit
        for path in files:
            _write(path, str(limit_bytes))

    def arm_oom_killer(self, directory: Path) -> None:
        """v1 has no group kill: the OOM killer takes the largest processes one by one. A child
        inherits oom_kill_disable, under which a snippet over its bound would hang, not end."""
        _write(directory / "memory.oom_control", "0")

    def entry_files(self, snippet: Path) -> list[Path]:
        return [snippet / "program" / "cgroup.procs"]

    def oom_kills(self, directory: Path) -> int:
        return _field(directory / "memory.oom_control", "oom_kill")

    def reached_limit(self, directory: Path) -> bool:
        """Whether its use reached its own limit (within one charge batch): its failcnt stays 0
        on recent kernels, its high-water mark does not."""
        limit = int((directory / "memory.limit_in_bytes").read_text())
        peaks = [
            directory / "memory.max_usage_in_bytes",
            directory / "memory.memsw.max_usage_in_bytes",
        ]
        return any(int(path.read_text()) + CHARGE_BATCH >= limit for path in peaks if path.exists())


@dataclass(frozen=True)
class Unavailable:
    """Why no snippet's memory is bounded here: for the log, the system check and the docs."""

    reason: str


@dataclass(frozen=True)
class Tree:
    """loop-sandbox/, made and ready for the person cgroups."""

    directory: Path
    version: Version


@dataclass(frozen=True)
class SnippetCgroup:
    """One sandbox's cgroups: its chain enters `launch`, the sandbox itself `program`."""

    directory: Path
    version: Version
    owner: MemoryCgroups = field(compare=False, repr=False)  # the host's, which made it

    @property
    def program(self) -> Path:
        return self.directory / "program"

    @property
    def launch(self) -> Path:
        return self.directory / "launch"

    def launch_prefix(self) -> list[str]:
        """The chain's first step: from here on it is under its person's bound."""
        return enter_prefix(self.launch)

    def program_prefix(self) -> list[str]:
        """The step before the sandbox proper: from here on it is under the snippet's bound."""
        return enter_prefix(self.program)

    @property
    def program_entry(self) -> Path:
        """The file a process writes its pid to to enter program/ (what program_prefix does)."""
        return self.program / "cgroup.procs"

    def release(self) -> Bound | None:
        """After the sandbox has ended: wait for its processes to be gone, remove its cgroups
        (and its person's, when idle); which bound got processes of it OOM-killed, if any."""
        self.owner.left_behind.retry()
        try:
            _drain(self.program)
            _drain(self.launch)
            killed = self.version.oom_kills(self.program) > 0
            own_limit = killed and self.version.reached_limit(self.program)
        except (OSError, TimeoutError) as error:
            logger.warning("A snippet's memory cgroup could not be read or emptied: %s", error)
            self.owner.left_behind.add(self)
            return None
        if not self.remove():
            self.owner.left_behind.add(self)
        if not killed:
            return None
        return "snippet" if own_limit else "person"

    def remove(self, *, quietly: bool = False) -> bool:
        """Remove its cgroups (and its person's, when idle); False if one is still in use."""
        for directory in (self.program, self.launch, self.directory):
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError as error:
                if not quietly:
                    logger.warning("A snippet's memory cgroup was left behind: %s", error)
                return False
        with self.owner.persons:  # never while a snippet of theirs is being made in it
            _remove_if_unused(self.directory.parent)  # kept while another snippet of theirs runs
        return True


class LeftBehind:
    """Snippet cgroups whose processes outlived `release`'s wait (a saver still saving, say):
    removed by a later release in this process once they are empty, so none piles up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cgroups: set[SnippetCgroup] = set()

    def add(self, cgroup: SnippetCgroup) -> None:
        with self.lock:
            self.cgroups.add(cgroup)

    def retry(self) -> None:
        with self.lock:
            waiting = list(self.cgroups)
        for cgroup in waiting:
            if cgroup.remove(quietly=True):
                with self.lock:
                    self.cgroups.discard(cgroup)


class MemoryCgroups:
    """A sandbox host's cgroups for snippets: the tree found and checked once, then one per
    snippet, and those left behind to remove later."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Held while a person's cgroup is made into a snippet's or removed as idle: otherwise one
        # snippet's end removes it between another's making it and making its snippet in it.
        self.persons = threading.Lock()
        self.found: dict[str, Tree | Unavailable] = {}  # by LOOP_SANDBOX_CGROUP
        self.numbers = itertools.count()
        # Which of this process's hosts made a snippet's cgroup: numbered apart, never alike.
        self.token = os.urandom(4).hex()
        self.left_behind = LeftBehind()

    def state(self) -> Tree | Unavailable:
        """The tree to make snippet cgroups in, or why there is none (logged once)."""
        setting = settings.LOOP_SANDBOX_CGROUP
        with self.lock:
            found = self.found.get(setting)
            if found is None:
                self.found[setting] = found = _make_tree(setting)
                if isinstance(found, Unavailable):
                    logger.warning(
                        "run_code: no memory bound per snippet and per person, only %s MiB per "
                        "process: %s",
                        settings.LOOP_SANDBOX_MEMORY_MB,
                        found.reason,
                    )
            return found

    def snippet(self, person: str, uid: int | None, limit_bytes: int) -> SnippetCgroup | None:
        """Make one sandbox's cgroups; None where no cgroup can be used here (the sandbox keeps
        its per-process limit only). CgroupError where cgroups can be used but these could not
        be made: a snippet never runs unbounded by surprise."""
        tree = self.state()
        if isinstance(tree, Unavailable):
            return None
        person_directory = tree.directory / f"person-{person}"
        name = f"snippet-{os.getpid()}-{self.token}-{next(self.numbers)}"
        directory = person_directory / name
        try:
            with self.persons:
                _make_person(tree.version, person_directory)
                _make_snippet(tree.version, directory, uid, limit_bytes)
        except OSError as error:
            for made in (directory / "program", directory / "launch", directory):
                with suppress(OSError):  # what of it was made: the error says what failed
                    made.rmdir()
            raise CgroupError(
                error.errno, f"cannot make the snippet's memory cgroup: {error}"
            ) from error
        return SnippetCgroup(directory, tree.version, self)

    def forget(self) -> None:
        """In a forked child: its pid names its snippets' cgroups, and its tree is found anew."""
        MemoryCgroups.__init__(self)


def enter_prefix(cgroup: Path) -> list[str]:
    return ["/bin/sh", "-c", ENTER, "sh", str(cgroup / "cgroup.procs")]


def _make_tree(setting: str) -> Tree | Unavailable:
    try:
        base, version = _locate(setting)
        try:
            version.open_base(base)
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
            raise NoCgroup(
                f"{base} holds processes, so cgroup v2 cannot give its children the memory "
                "controller. Delegate a cgroup subtree to the worker (systemd: Delegate=yes), run "
                "its processes in a leaf of it, and set LOOP_SANDBOX_CGROUP to an empty cgroup "
                "of that subtree (docs/tools.md)."
            ) from error
        tree = base / TREE
        tree.mkdir(exist_ok=True)
        version.open_for_children(tree)
        _remove_stale(tree)
    except NoCgroup as error:
        return Unavailable(str(error))
    except OSError as error:
        return Unavailable(f"cannot make a memory cgroup: {error}")
    return Tree(tree, version)


def _locate(setting: str) -> tuple[Path, Version]:
    """The base cgroup directory and its version: LOOP_SANDBOX_CGROUP, or this process's own
    memory cgroup (v2 where the unified hierarchy has the memory controller, else v1)."""
    if setting:
        return Path(setting), _version_of(Path(setting))
    return own_memory_cgroup(
        Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()
    )


def own_memory_cgroup(cgroups: str, mounts: str) -> tuple[Path, Version]:
    """Where this process's memory cgroup shows, from its /proc/self/cgroup and mountinfo."""
    memberships = {}  # hierarchy: this process's cgroup path in it
    for line in cgroups.splitlines():
        number, controllers, path = line.split(":", 2)
        memberships["v2" if number == "0" else controllers] = path
    for mount in mounts.splitlines():
        fields = mount.split()
        root, point = fields[3], fields[4]
        kind, options = fields[fields.index("-") + 1], fields[fields.index("-") + 3]
        if kind == "cgroup2" and "v2" in memberships:
            directory = _inside(point, root, memberships["v2"])
            if directory is not None and _has_memory_controller(directory):
                return directory, V2()
        if kind == "cgroup" and "memory" in options.split(","):
            found = next((p for c, p in memberships.items() if "memory" in c.split(",")), None)
            directory = None if found is None else _inside(point, root, found)
            if directory is not None:
                return directory, V1()
    raise NoCgroup(
        "this process's cgroup has no memory controller mounted where Loop can reach it "
        "(see /proc/self/cgroup); set LOOP_SANDBOX_CGROUP to a cgroup directory that has one"
    )


def _version_of(directory: Path) -> Version:
    if _has_memory_controller(directory):
        return V2()
    if (directory / "memory.limit_in_bytes").is_file():
        return V1()
    raise NoCgroup(
        f"LOOP_SANDBOX_CGROUP={directory} is not a cgroup directory with the memory controller "
        "(cgroup v2: memory in cgroup.controllers; v1: memory.limit_in_bytes)"
    )


def _has_memory_controller(directory: Path) -> bool:
    controllers = directory / "cgroup.controllers"
    return controllers.is_file() and "memory" in controllers.read_text().split()


def _inside(mount_point: str, mount_root: str, path: str) -> Path | None:
    """Where a cgroup path shows in a mount of its hierarchy (whose root may be a cgroup below
    the hierarchy's own, in a container); None when the mount does not show it."""
    if mount_root == "/":
        return Path(mount_point, path.lstrip("/"))
    if path == mount_root or path.startswith(mount_root + "/"):
        return Path(mount_point, path[len(mount_root) :].lstrip("/"))
    return None


def _make_person(version: Version, directory: Path) -> None:
    directory.mkdir(exist_ok=True)
    version.bound(directory, settings.LOOP_SANDBOX_PERSON_MEMORY_MB * MIB)
    version.open_for_children(directory)


# The person's cgroup was removed as idle by another worker meanwhile: gone (ENOENT), or going,
# still listed but dead, where the kernel refuses a child in it (ENODEV).
PERSON_REMOVED = frozenset({errno.ENOENT, errno.ENODEV})


def _make_snippet(version: Version, directory: Path, uid: int | None, limit_bytes: int) -> None:
    for attempt in range(3):
        try:
            directory.mkdir()
            break
        except OSError as error:
            if error.errno not in PERSON_REMOVED or attempt == 2:
                raise
            with suppress(OSError):  # still going: the next try finds it gone, or fails saying so
                _make_person(version, directory.parent)
    version.open_for_children(directory)
    (directory / "launch").mkdir()
    (directory / "program").mkdir()
    version.bound(directory / "program", limit_bytes)
    version.arm_oom_killer(directory / "program")
    if uid is not None:  # the step into program/ runs as the snippet's uid, after the overlay
        for path in version.entry_files(directory):
            os.chown(path, uid, -1)


def _remove_stale(tree: Path) -> None:
    """Remove what the snippets of a worker that died (kill -9) left: their processes died with
    it (--die-with-parent), their empty cgroups did not."""
    for snippet in tree.glob("person-*/snippet-*-*"):
        pid = int(snippet.name.split("-")[1])
        if pid == os.getpid() or _alive(pid):
            continue
        for directory in (snippet / "program", snippet / "launch", snippet, snippet.parent):
            _remove_if_unused(directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, as another uid
        pass
    return True


def _drain(cgroup: Path) -> None:
    """Wait until no process is left in the cgroup (a zombie is not listed)."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while pids := [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]:
        for pid in pids:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                left = deadline - time.monotonic()
                if left <= 0 or not poller.poll(left * 1000):
                    raise TimeoutError(f"{cgroup} holds processes after {DRAIN_SECONDS} s")
            finally:
                os.close(pidfd)


def _remove_if_unused(directory: Path) -> None:
    """Remove a cgroup unless it is in use (a process or a child in it) or gone already."""
    try:
        directory.rmdir()
    except OSError as error:
        if error.errno not in {errno.EBUSY, errno.ENOTEMPTY, errno.ENOENT}:
            raise


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:  # one write: cgroup files take a value per write
        handle.write(value)


def _field(path: Path, name: str) -> int:
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    raise OSError(errno.ENOENT, f"{path} has no {name} field")
