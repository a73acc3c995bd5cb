"""The project as a whole: checks pass, migrations are complete, daphne serves it."""

import http.client
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from django.core.management import call_command

from tests.conftest import PROJECT_DIR, child_environment


def test_system_checks_pass():
    call_command("check", fail_level="WARNING")


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration():
    call_command("makemigrations", check=True, dry_run=True, verbosity=0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(
    url: str, seconds: float, server: subprocess.Popen | None = None
) -> http.client.HTTPResponse:
    """The page, once the server answers: a server that exits first fails at once; `seconds` is
    only a backstop for one that never listens (a loaded CI machine can take long to start it)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return urllib.request.urlopen(url, timeout=5)  # noqa: S310 (a local http URL)
        except OSError:
            if server is not None and server.poll() is not None:
                raise AssertionError(f"the server exited ({server.returncode})") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_daphne_serves_the_site_and_its_static_files(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-p", str(port), "loopsite.asgi:application"],
        cwd=PROJECT_DIR,
        env=child_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        page = wait_for(f"http://127.0.0.1:{port}/admin/login/", seconds=180, server=server)
        assert page.status == 200
        assert b"csrfmiddlewaretoken" in page.read()
        stylesheet = wait_for(f"http://127.0.0.1:{port}/static/admin/css/base.css", seconds=5)
        assert stylesheet.headers["Content-Type"].startswith("text/css")
    finally:
        server.terminate()
        server.wait(timeout=10)
