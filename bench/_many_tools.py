"""An MCP server offering many tools, for bench/mcp_calls.py's run with 100 MCP tools offered.

    python -m bench._many_tools --port 0 [--tools 100]

The SDK's MCPServer (the 2026-07-28 revision, as it comes) on 127.0.0.1, printing `PORT <n>`
once it accepts connections (tests/mcp_servers' way, so its harness starts and stops it). Each
tool is shaped like a real server's search tool: a description of a couple of sentences and
three arguments, one required, so the request size it adds to a model turn is typical rather
than minimal.
"""

import argparse
from collections.abc import Sequence

from mcp.server.mcpserver import MCPServer

from tests.mcp_servers import run_until_stopped

MCP_PATH = "/mcp"
SUBJECTS = ("issues", "pages", "invoices", "tickets", "contacts", "events", "files", "orders")


def search(query: str, limit: int = 10, include_archived: bool = False) -> str:
    return f"{limit} results for {query!r}"


def description(number: int) -> str:
    subject = SUBJECTS[number % len(SUBJECTS)]
    return (
        f"Searches the {subject} of workspace {number} for a query and answers with the best "
        f"matches, newest first, each with its title, its link and a short excerpt. Archived "
        f"{subject} are left out unless include_archived is true."
    )


def many_tools(count: int) -> MCPServer:
    server: MCPServer = MCPServer("bench-many-tools", version="1.0")
    for number in range(count):
        server.add_tool(
            search,
            name=f"search_{number:03d}",
            description=description(number),
            structured_output=False,
        )
    return server


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", type=int, default=100)
    args = parser.parse_args(argv)
    server = many_tools(args.tools)
    run_until_stopped(
        lambda port: server.streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, host="127.0.0.1"
        ),
        args.port,
    )


if __name__ == "__main__":
    main()
