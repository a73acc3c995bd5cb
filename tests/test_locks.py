"""Installs are reproducible: every requirements*.txt pins each package of the tree exactly, with
the hashes of its files, and the pins sit inside the ranges requirements*.in accept. A range left
in a lock, a package the ranges name but the lock forgot, or a lock older than a narrowed range
fails here, before a fresh clone installs what CI never tested."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.fast

PROJECT_DIR = Path(__file__).resolve().parent.parent
LOCKS = ("requirements.txt", "requirements-dev.txt", "requirements-model.txt")
RANGES = {"requirements.in": "requirements.txt", "requirements-dev.in": "requirements-dev.txt"}


def entries(path: Path) -> list[str]:
    """The requirement entries of a pip requirements file, continuation lines joined, comments
    and options (`-r`, `-c`) left out."""
    joined = path.read_text().replace("\\\n", " ")
    lines = (line.split(" #")[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith(("#", "-"))]


def pins(lock: str) -> dict[str, str]:
    pinned = {}
    for entry in entries(PROJECT_DIR / lock):
        requirement = Requirement(entry.split(" --hash")[0])
        (specifier,) = requirement.specifier
        pinned[canonicalize_name(requirement.name)] = specifier.version
    return pinned


@pytest.mark.parametrize("lock", LOCKS)
def test_every_package_in_a_lock_is_one_exact_version_with_its_hashes(lock):
    found = entries(PROJECT_DIR / lock)
    assert found
    for entry in found:
        requirement, *hashes = entry.split(" --hash=")
        specifiers = list(Requirement(requirement).specifier)
        assert [s.operator for s in specifiers] == ["=="], f"{lock}: {requirement} is not pinned"
        assert hashes, f"{lock}: {requirement} has no hash"
        assert all(h.strip().startswith("sha256:") for h in hashes)


@pytest.mark.parametrize(("ranges", "lock"), RANGES.items())
def test_each_range_is_locked_at_a_version_it_admits(ranges, lock):
    locked = pins(lock)
    for entry in entries(PROJECT_DIR / ranges):
        requirement = Requirement(entry)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement.name} is in {ranges} but not locked in {lock}"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"{lock} locks {requirement.name}=={locked[name]} outside {ranges}'s {requirement}"
        )


def test_the_test_tree_runs_the_versions_production_installs():
    runtime, dev = pins("requirements.txt"), pins("requirements-dev.txt")
    assert {name: dev.get(name) for name in runtime} == runtime
