import logging
import os

from shop_telemetry import setup
from shop_telemetry.http import serve

telemetry = setup("shop-agent")

from shop_agent.app import app  # noqa: E402


def main() -> None:
    port = int(os.environ.get("SHOP_AGENT_PORT", "8012"))
    logging.getLogger("shop_agent").info("shop-agent ready", extra={"server.port": port})
    serve(app, port, telemetry)


if __name__ == "__main__":
    main()
