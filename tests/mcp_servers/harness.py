"""Starting and stopping the MCP test servers from tests.

    from tests.mcp_servers.harness import serve, serve_oauth

    with serve("--revision", "legacy") as server:          # tests/mcp_servers/app.py
        async with mcp.Client(server.url) as client: ...
    with serve_oauth("--access-seconds", "60") as issuer:  # tests/mcp_servers/oauth_server.py
        with serve("--auth", "oauth", "--issuer", issuer.base_url) as server: ...

Each runs as a subprocess of this interpreter on 127.0.0.1, port 0; `serve` waits for its
`PORT <n>` line and stops it on exit. The MCP server gets a fresh state directory unless one is
given: `Served.set_changing(...)` rewrites the `changing` tool, `Served.calls()` reads back the
tool calls that reached the server, `Served.reset()` forgets both.

Module-scoped fixtures (import them into a test module: `from tests.mcp_servers.harness import
modern_server_fixture  # noqa: F401`): `modern_server`, `legacy_server`, `bearer_server` (needs
`Authorization: Bearer <TOKEN>`), `oauth_server` (the authorization server) and
`oauth_mcp_server` (an MCP server protected by it).
"""

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tests.mcp_servers.app import CALLS_FILE, CHANGING_FILE
from tests.mcp_servers.misbehaving import MCP_PATH

PROJECT_DIR = Path(__file__).resolve().parents[2]
APP = "tests.mcp_servers.app"
OAUTH = "tests.mcp_servers.oauth_server"
MISBEHAVING = "tests.mcp_servers.misbehaving"
TOKEN = "test-token-1234"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0

_PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@dataclass
class Served:
    """A running server: `url` is its MCP endpoint (the app) or its issuer (the OAuth server)."""

    url: str
    base_url: str
    port: int
    process: subprocess.Popen[str]
    state_dir: Path

    def set_changing(
        self,
        description: str,
        input_schema: dict[str, Any] | None = None,
        answer: str | None = None,
    ) -> None:
        """The `changing` tool's definition from the next listing on (a rug pull)."""
        definition: dict[str, Any] = {"description": description}
        if input_schema is not None:
            definition["input_schema"] = input_schema
        if answer is not None:
            definition["answer"] = answer
        (self.state_dir / CHANGING_FILE).write_text(json.dumps(definition))

    def calls(self) -> list[dict[str, Any]]:
        """Every tool call that reached the server, in order: `{"tool": ..., "arguments": ...}`."""
        path = self.state_dir / CALLS_FILE
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def reset(self) -> None:
        """The `changing` tool as it started, and no calls recorded."""
        for name in (CHANGING_FILE, CALLS_FILE):
            (self.state_dir / name).unlink(missing_ok=True)


@contextlib.contextmanager
def serve(*args: str, module: str = APP, state_dir: Path | None = None) -> Iterator[Served]:
    """Run `python -m <module> --port 0 <args>` until the block ends."""
    with contextlib.ExitStack() as stack:
        starting = _start(stack, args, module, state_dir)
        yield _ready(starting)


@contextlib.contextmanager
def serve_all(*servers: Sequence[str]) -> Iterator[list[Served]]:
    """Several MCP servers (tests/mcp_servers/app.py, each with its own arguments), started side
    by side: each spends seconds importing the SDK."""
    with contextlib.ExitStack() as stack:
        starting = [_start(stack, args, APP, None) for args in servers]
        yield [_ready(each) for each in starting]


@dataclass
class _Starting:
    process: subprocess.Popen[str]
    command: list[str]
    module: str
    stderr: IO[str]
    state_dir: Path


def _start(
    stack: contextlib.ExitStack, args: Sequence[str], module: str, state_dir: Path | None
) -> _Starting:
    if state_dir is None:
        state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-state-")))
    command = [sys.executable, "-m", module, "--port", "0", *args]
    if module == APP and "--misbehave" in args:
        # The same server without the SDK's seconds of imports.
        way = args[list(args).index("--misbehave") + 1]
        command = [sys.executable, "-m", MISBEHAVING, "--port", "0", way]
    elif module == APP:
        command += ["--state-dir", str(state_dir)]
    stderr = stack.enter_context(tempfile.TemporaryFile("w+"))  # noqa: SIM115 (the stack closes it)
    env = {key: value for key, value in os.environ.items() if key not in _PROXY_VARIABLES}
    process = subprocess.Popen(
        command,
        cwd=PROJECT_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    stack.callback(_stop, process)
    return _Starting(process, command, module, stderr, state_dir)


def _ready(starting: _Starting) -> Served:
    port = _wait_for_port(starting.process, starting.stderr, starting.command)
    base_url = f"http://127.0.0.1:{port}"
    url = base_url + MCP_PATH if starting.module == APP else base_url
    return Served(url, base_url, port, starting.process, starting.state_dir)


def serve_oauth(*args: str) -> contextlib.AbstractContextManager[Served]:
    """The OAuth authorization server (tests/mcp_servers/oauth_server.py); `url` is its issuer."""
    return serve(*args, module=OAUTH)


def _wait_for_port(process: subprocess.Popen[str], stderr: IO[str], command: list[str]) -> int:
    """The port from the child's `PORT <n>` line; its stdout is drained from then on so it can
    never block on a full pipe."""
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        line = lines.get(timeout=START_TIMEOUT)
    except queue.Empty:
        line = ""
    if not line.startswith("PORT "):
        _stop(process)
        stderr.seek(0)
        raise RuntimeError(
            f"{' '.join(command)} did not start (exit {process.returncode}, said {line!r}):\n"
            + stderr.read()
        )
    return int(line.split()[1])


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module", name="modern_server")
def modern_server_fixture() -> Iterator[Served]:
    """The SDK's server as it comes: a client in mode="auto" settles on 2026-07-28."""
    with serve("--revision", "modern") as server:
        yield server


@pytest.fixture(scope="module", name="legacy_server")
def legacy_server_fixture() -> Iterator[Served]:
    """A server of the initialize handshake only: mode="auto" falls back to 2025-11-25."""
    with serve("--revision", "legacy") as server:
        yield server


@pytest.fixture(scope="module", name="bearer_server")
def bearer_server_fixture() -> Iterator[Served]:
    """A modern server that answers only requests with `Authorization: Bearer <TOKEN>`."""
    with serve("--revision", "modern", "--token", TOKEN) as server:
        yield server


@pytest.fixture(scope="module", name="oauth_server")
def oauth_server_fixture() -> Iterator[Served]:
    """The OAuth authorization server (its `url` is the issuer)."""
    with serve_oauth() as server:
        yield server


@pytest.fixture(scope="module", name="oauth_mcp_server")
def oauth_mcp_server_fixture(oauth_server: Served) -> Iterator[Served]:
    """A modern MCP server protected by `oauth_server`."""
    with serve("--revision", "modern", "--auth", "oauth", "--issuer", oauth_server.url) as server:
        yield server
