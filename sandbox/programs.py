"""The host's programs the sandbox's chain runs, and the environment they run in."""

import shutil

from sandbox.errors import SandboxUnavailable

HOST_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


def require_program(name: str, package: str) -> str:
    """Where the host's `name` is; SandboxUnavailable, saying which package, if it is missing."""
    path = shutil.which(name, path=HOST_PATH)
    if path is None:
        raise SandboxUnavailable(
            f"run_code cannot run: {name} is not installed. Install the {package} package "
            f"(Debian: apt-get install {package})."
        )
    return path


def environment_for_host_process() -> dict[str, str]:
    """setpriv, prlimit and (in subprocess mode) the snippet get nothing of the worker's secrets."""
    return {"PATH": HOST_PATH, "LANG": "C.UTF-8"}
