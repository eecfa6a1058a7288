"""A tiny MCP server (Python `mcp` package, `pip install mcp`): a notebook kept in a JSON file."""

import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
PATH = os.environ.get("NOTES_FILE") or "notes.json"


def load() -> list:
    try:
        with open(PATH) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


@server.tool(description="Save a note.")
def add_note(text: str) -> str:
    notes = load() + [text]
    with open(PATH, "w") as f:
        json.dump(notes, f)
    return f"saved note {len(notes)}"


@server.tool(description="List every saved note.")
def list_notes() -> list:
    return load()


@server.tool(description="Delete every note.")
def delete_all() -> str:
    with open(PATH, "w") as f:
        json.dump([], f)
    return "deleted"


if __name__ == "__main__":
    server.run("stdio")
