"""memstore as an MCP server (the official ``mcp`` SDK): ``memstore mcp``
over stdio, and ``/mcp`` of the gateway over streamable HTTP. Needs the
"mcp" extra. Named ``mcpserver`` so it never shadows the SDK's ``mcp``."""

from memstore.mcpserver.tools import USER_HEADER, build_server

__all__ = ["USER_HEADER", "build_server"]
