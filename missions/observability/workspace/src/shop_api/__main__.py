import logging
import os

from shop_telemetry import setup
from shop_telemetry.http import serve

telemetry = setup("shop-api")

from shop_api import catalog, db  # noqa: E402
from shop_api.app import app  # noqa: E402


def main() -> None:
    catalog.build(db.DB_PATH, size=int(os.environ.get("SHOP_CATALOG_SIZE", "3000")))
    logging.getLogger("shop_api").info("catalog ready", extra={"shop.catalog.path": db.DB_PATH})
    port = int(os.environ.get("SHOP_API_PORT", "8010"))
    serve(app, port, telemetry)


if __name__ == "__main__":
    main()
