"""An MCP endpoint that misbehaves at the HTTP level: every POST to `/mcp` is answered with
non-JSON (`malformed`), a 500 (`status500`), a connection cut mid-body (`cut`) or a well-formed
answer dripped one byte a second (`drip`). It imports no SDK, so it starts in a fraction of the
MCP server's time:

    python -m tests.mcp_servers.misbehaving --port 0 malformed|status500|cut|drip

(`python -m tests.mcp_servers.app --misbehave WAY` is the same server.)
"""

import argparse
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.mcp_servers import run_until_stopped

MCP_PATH = "/mcp"
WAYS = ("malformed", "status500", "cut", "drip")


def misbehaving_app(how: str) -> ASGIApp:
    """A server at `/mcp` whose every POST is answered wrongly at the HTTP level."""
    answers: dict[str, Callable[[Request], Awaitable[Response]]] = {
        "malformed": _malformed,
        "status500": _status500,
        "drip": _drip,
    }

    async def refuse(request: Request) -> Response:
        return Response(status_code=405)

    routes = [Route(MCP_PATH, refuse, methods=["GET", "DELETE"])]
    if how == "cut":
        return _Cut(Starlette(routes=routes))
    routes.append(Route(MCP_PATH, answers[how], methods=["POST"]))
    return Starlette(routes=routes)


async def _malformed(request: Request) -> Response:
    return Response(b'{"jsonrpc": "2.0", "id": <<not json', media_type="application/json")


async def _status500(request: Request) -> Response:
    return Response(b"Internal Server Error", status_code=500, media_type="text/plain")


async def _drip(request: Request) -> Response:
    """A well-formed answer to the request, one byte a second."""
    message = await request.json()
    body = json.dumps(
        {"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32603, "message": "slow"}}
    ).encode()

    async def bytes_slowly() -> AsyncIterator[bytes]:
        for index in range(len(body)):
            yield body[index : index + 1]
            await anyio.sleep(1)

    return StreamingResponse(bytes_slowly(), media_type="application/json")


class _Cut:
    """Every POST to /mcp is answered with headers promising a body, half a body, and a closed
    connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != MCP_PATH:
            await self.app(scope, receive, send)
            return
        # The request is read first: a socket closed with unread data in it is reset, and the
        # client would see a reset instead of a body that stops short.
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"1000")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b'{"jsonrpc": "2.0", "res', "more_body": True}
        )
        raise ConnectionAbortedError("cut on purpose")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("way", choices=WAYS)
    args = parser.parse_args(argv)
    run_until_stopped(lambda port: misbehaving_app(args.way), args.port)


if __name__ == "__main__":
    main()
