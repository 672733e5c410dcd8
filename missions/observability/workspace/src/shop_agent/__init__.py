"""The shopping assistant: answers questions with the shop's MCP tools and a chat model."""
