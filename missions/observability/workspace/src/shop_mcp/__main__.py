import logging
import os

from shop_telemetry import setup
from shop_telemetry.http import serve

telemetry = setup("shop-mcp")

from shop_mcp.server import build_app  # noqa: E402


def main() -> None:
    port = int(os.environ.get("SHOP_MCP_PORT", "8011"))
    app = build_app()
    logging.getLogger("shop_mcp").info("shop-mcp ready", extra={"server.port": port})
    serve(app, port, telemetry)


if __name__ == "__main__":
    main()
