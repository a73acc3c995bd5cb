"""The test server's tools over stdio, as an operator's command would serve them:
`python -m tests.mcp_servers.stdio_app [--state-dir DIR]` (run from the project's directory)."""

import argparse
import os
from pathlib import Path

from tests.mcp_servers.app import TestServer, add_tools


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir")
    args = parser.parse_args()
    server = TestServer(Path(args.state_dir) if args.state_dir else None)
    add_tools(server)

    @server.tool(structured_output=False)
    def environment() -> str:
        """The names of the variables this process was started with."""
        return " ".join(sorted(os.environ))

    server.run("stdio")


if __name__ == "__main__":
    main()
