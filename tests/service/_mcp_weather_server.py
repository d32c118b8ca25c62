"""A small MCP server for tests/service/test_mcp_proxy.py, run over stdio: two tools and one resource.
With `--http PORT` it serves streamable HTTP on 127.0.0.1:PORT/mcp instead, for two minutes at most.

Every call it executes is appended to the file named by $CALLS_LOG, so a test can see which
calls reached the server.
"""

import json
import os
import sys
import threading

from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


def _log(name: str, arguments: dict) -> None:
    path = os.environ.get("CALLS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"name": name, "arguments": arguments}) + "\n")


@server.tool()
def get_weather(city: str, days: int = 1) -> str:
    """The forecast for a city over a number of days."""
    _log("get_weather", {"city": city, "days": days})
    return f"{city}: sunny for {days} day(s)"


@server.tool()
def delete_account(account_id: str, confirm: bool) -> str:
    """Delete an account (destructive)."""
    _log("delete_account", {"account_id": account_id, "confirm": confirm})
    return f"deleted {account_id}"


@server.resource("notes://today")
def notes() -> str:
    """Today's notes."""
    return "bring an umbrella"


if __name__ == "__main__":
    if "--http" in sys.argv:
        threading.Timer(120, os._exit, (0,)).start()  # a bounded lifetime: never left running
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run()
