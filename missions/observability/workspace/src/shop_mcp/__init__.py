"""MCP tools over the shop catalog API."""
