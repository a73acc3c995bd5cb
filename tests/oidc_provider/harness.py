"""The real OpenID Connect provider of the sign-in tests: `node server.mjs` (the certified
`oidc-provider`, installed by `make oidc-provider-deps`) on a free port of 127.0.0.1, started
once per test session (per xdist worker) and stopped at its end.

Its one client's redirect URI must name the Loop under test, so the provider is started for a
Loop port chosen first; `sign_in_site` then serves Loop on that port. The people the provider
admits are a JSON file read at every look-up: `people(...)` rewrites it, so a test removes a
person from the organisation between two requests."""

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for

DIRECTORY = Path(__file__).resolve().parent
CLIENT_ID = "loop-tests"
CLIENT_SECRET = "a client secret long enough to be one 42"
NAME = "Test Org"


@dataclass
class Provider:
    issuer: str
    loop_port: int
    accounts: Path

    @property
    def loop_url(self) -> str:
        return f"http://127.0.0.1:{self.loop_port}"

    def people(self, *people: dict[str, Any]) -> None:
        """The people the provider admits from now on: sub, preferred_username, email, groups."""
        draft = self.accounts.with_suffix(".draft")
        draft.write_text(json.dumps(list(people)))
        draft.replace(self.accounts)

    def site_env(self, **overrides: str) -> dict[str, str]:
        """Loop's settings for signing in through this provider."""
        return {
            "LOOP_OIDC_ISSUER": self.issuer,
            "LOOP_OIDC_CLIENT_ID": CLIENT_ID,
            "LOOP_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "LOOP_OIDC_NAME": NAME,
            **overrides,
        }


def free_port() -> int:
    from tests.test_browser import free_port as free

    return free()


@contextmanager
def serve_provider(loop_port: int) -> Iterator[Provider]:
    node = shutil.which("node")
    if node is None or not (DIRECTORY / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("The test provider needs node and `make oidc-provider-deps`.")
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        provider = Provider(f"http://127.0.0.1:{port}", loop_port, Path(scratch) / "people.json")
        provider.people()
        env = {
            **os.environ,
            "OIDC_PORT": str(port),
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_REDIRECT_URI": f"{provider.loop_url}/oidc/callback/",
            "OIDC_ACCOUNTS": str(provider.accounts),
        }
        server = subprocess.Popen(
            [node, "server.mjs"],
            cwd=DIRECTORY,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def discovery_answers() -> bool:
            assert server.poll() is None, "the test provider exited"
            url = f"{provider.issuer}/.well-known/openid-configuration"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
                    return response.status == 200
            except OSError:
                return False

        try:
            wait_for(discovery_answers, "the test OpenID provider's discovery document")
            yield provider
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[Provider]:
    with serve_provider(free_port()) as provider:
        yield provider


@pytest.fixture
def sign_in_site(
    oidc_provider: Provider, worker_env, start_worker, monkeypatch
) -> Callable[..., Any]:
    """`with sign_in_site(**settings) as url:` Loop (daphne and a worker, tests.test_browser's
    `site`) on the port the provider redirects to, signing in through it."""
    from tests import test_browser

    monkeypatch.setattr(test_browser, "free_port", lambda: oidc_provider.loop_port)

    def start(**settings: str) -> Any:
        return test_browser.site(worker_env, start_worker, **oidc_provider.site_env(**settings))

    return start
