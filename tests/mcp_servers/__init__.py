"""Real MCP servers and a real OAuth authorization server for Loop's tests, built with the official
SDK (PyPI `mcp`) and run as subprocesses on 127.0.0.1, so Loop's client meets them over a socket
exactly as it meets a server on the internet.

- `app`: the MCP server (`python -m tests.mcp_servers.app --port 0 --revision modern|legacy ...`),
  or a server that misbehaves at the HTTP level (`--misbehave malformed|status500|cut|drip`).
- `oauth_server`: an OAuth 2.1 authorization server (`python -m tests.mcp_servers.oauth_server`).
- `harness`: `serve(...)` starts either and stops it again; pytest fixtures for the common ones.

Each process prints one line `PORT <n>` on stdout once it accepts connections; `run_until_stopped`
is the shared way to get there.
"""

import asyncio
import socket
import sys
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp

HOST = "127.0.0.1"


def bind(port: int) -> socket.socket:
    """The listening socket, bound before the app is built: a server whose address is part of
    what it publishes (resource metadata, an issuer) must know its port when port 0 was asked."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(128)
    return sock


def run_until_stopped(make_app: Callable[[int], ASGIApp], port: int) -> None:
    """Serve the app made for the bound port until SIGTERM/SIGINT, printing `PORT <n>` once the
    server accepts connections (the harness waits for that line)."""
    sock = bind(port)
    real_port = sock.getsockname()[1]
    config = uvicorn.Config(
        make_app(real_port),
        log_level="warning",
        # A `hang` call must not hold the process open when the test is over.
        timeout_graceful_shutdown=0.1,  # type: ignore[arg-type]  # asyncio.wait_for takes a float
    )
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                await serving
                return
            await asyncio.sleep(0.01)
        print(f"PORT {real_port}", flush=True)
        await serving

    asyncio.run(main())
    sys.stdout.flush()
