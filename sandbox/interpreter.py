"""The snippet's interpreter: the configured Python, started with -I, its program on stdin."""

import functools
import logging
import subprocess

from django.conf import settings

from sandbox.programs import environment_for_host_process

logger = logging.getLogger(__name__)


# The snippet's interpreter starts without the site module (-S), which costs about 2.5 ms of CPU a
# snippet (its imports, the dist-packages' .pth files, sitecustomize). This program puts back what
# a snippet sees of site: the interpreter's dist-packages on sys.path (after the standard library,
# where site puts them), exit() and quit(); then it runs the program on stdin as `python3 -I -`
# would: as __main__, __file__ "<stdin>", argv ["-"], an uncaught exception printed by
# sys.excepthook without this program's frame, exit status 1. What differs: sys.flags.no_site,
# os not imported ahead, what a .pth file would run, and a recursion limit two frames nearer.
SNIPPET_MAIN = """\
import sys as _sys, builtins as _builtins, _sitebuiltins
_sys.path += {paths!r}
_builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
_builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
_sys.argv[:] = ["-"]
def _main(sys=_sys, main=globals()):
    for name in ("_sys", "_builtins", "_sitebuiltins", "_main"):
        del main[name]
    main["__file__"], main["__cached__"] = "<stdin>", None
    try:
        exec(compile(sys.stdin.buffer.read(), "<stdin>", "exec"), main)
    except SystemExit:
        raise
    except BaseException as error:
        error.__traceback__ = error.__traceback__.tb_next
        sys.excepthook(type(error), error, error.__traceback__)
        raise SystemExit(1) from None
_main()
"""
_SITE_PACKAGES = "import os, site; print(*filter(os.path.isdir, site.getsitepackages()), sep='\\n')"


def interpreter_arguments() -> list[str]:
    """The snippet's interpreter. -I: no PYTHON* variables, no user site-packages, no script
    directory on sys.path; the code itself comes on stdin."""
    python = settings.LOOP_SANDBOX_PYTHON
    paths = _site_packages(python)
    if paths is None:
        return [python, "-I", "-"]
    return [python, "-I", "-S", "-c", SNIPPET_MAIN.format(paths=list(paths))]


@functools.cache
def _site_packages(python: str) -> tuple[str, ...] | None:
    """The directories the site module adds to this interpreter's sys.path, asked of it once a
    process (with -S: nothing of a .pth file or sitecustomize runs); None if it cannot say, and
    then snippets start with the site module."""
    try:
        listed = subprocess.run(  # noqa: S603 (the configured interpreter, a fixed program)
            [python, "-I", "-S", "-c", _SITE_PACKAGES],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=environment_for_host_process(),
        )
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("run_code: %s could not list its site-packages: %s", python, error)
        return None
    return tuple(listed.stdout.splitlines())
