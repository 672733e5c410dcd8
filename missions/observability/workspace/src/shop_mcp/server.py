"""The shop MCP server: four tools over the catalog API, served over streamable HTTP."""

from __future__ import annotations

import logging

from mcp.server import MCPServer
from opentelemetry import metrics
from starlette.requests import Request
from starlette.responses import JSONResponse

from shop_mcp import api

log = logging.getLogger("shop_mcp")
meter = metrics.get_meter("shop_mcp")
tool_calls = meter.create_counter("shop_mcp.tool.calls", unit="{call}", description="MCP tool calls by tool.")

mcp = MCPServer("shop-mcp", instructions="Search the shop catalog, read products and category stats, place orders.")


@mcp.custom_route("/health", methods=["GET"])
async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


@mcp.tool()
async def search_products(query: str, limit: int = 5) -> dict:
    """Search products by name; returns the best-rated matches with their details."""
    tool_calls.add(1, {"gen_ai.tool.name": "search_products"})
    found = await api.call("GET", "/search", params={"q": query, "limit": 10})
    items = []
    for hit in found.get("items", []):
        items.append(await api.call("GET", f"/products/{hit['id']}"))
    return {"query": query, "items": items[:limit]}


@mcp.tool()
async def get_product(product_id: int) -> dict:
    """Read one product by id."""
    tool_calls.add(1, {"gen_ai.tool.name": "get_product"})
    return await api.call("GET", f"/products/{product_id}")


@mcp.tool()
async def category_stats() -> dict:
    """Per-category product counts, stock and average price and rating."""
    tool_calls.add(1, {"gen_ai.tool.name": "category_stats"})
    return await api.call("GET", "/stats")


@mcp.tool()
async def place_order(product_id: int, quantity: int = 1) -> dict:
    """Order a quantity of a product; returns the order reference."""
    tool_calls.add(1, {"gen_ai.tool.name": "place_order"})
    result = await api.call("POST", "/orders", json={"product_id": product_id, "qty": quantity})
    if "order_ref" in result:
        log.info("order placed through mcp", extra={"shop.order.ref": result["order_ref"]})
    return result


def build_app():
    return mcp.streamable_http_app(host="127.0.0.1")
