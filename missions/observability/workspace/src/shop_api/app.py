"""The catalog API: products, search, per-category stats and orders."""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict

from fastapi import FastAPI, HTTPException, Query
from opentelemetry import metrics, trace
from pydantic import BaseModel

from shop_api import db
from shop_telemetry import SECONDS_BUCKETS
from shop_telemetry.http import NATIVE_TELEMETRY_OFF, ServerSpanMiddleware

log = logging.getLogger("shop_api")
meter = metrics.get_meter("shop_api")
request_duration = meter.create_histogram(
    "http.server.request.duration", unit="s", description="Duration of HTTP server requests.",
    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
)
orders_placed = meter.create_counter("shop.orders.placed", unit="{order}", description="Orders accepted.")
order_units = meter.create_counter("shop.orders.units", unit="{unit}", description="Units ordered.")

PRODUCT_COLUMNS = "id, sku, name, category, price, stock, rating"
PAYMENT_AUTH_S = 0.25  # how long the card network takes to authorise a payment (simulated: no gateway here)


def authorize_payment(total: float) -> None:
    """The card network's authorisation of an order's total, simulated by its usual answer time."""
    time.sleep(PAYMENT_AUTH_S)


def _record(method: str, route: str, status: int, seconds: float) -> None:
    request_duration.record(
        seconds, {"http.request.method": method, "http.route": route, "http.response.status_code": status}
    )


app = FastAPI(title="shop-api", telemetry=NATIVE_TELEMETRY_OFF)
app.add_middleware(ServerSpanMiddleware, tracer_name="shop_api", on_request=_record)


class OrderIn(BaseModel):
    product_id: int
    quantity: int = 1


@app.get("/health")
def health() -> dict:
    return {"status": "ok"}


@app.get("/products")
def list_products(category: str | None = None, page: int = 1, size: int = Query(20, le=100)) -> dict:
    offset = (max(page, 1) - 1) * size
    if category:
        rows = db.query(
            f"SELECT {PRODUCT_COLUMNS} FROM products WHERE category = ? ORDER BY id LIMIT ? OFFSET ?",
            (category, size, offset),
        )
    else:
        rows = db.query(f"SELECT {PRODUCT_COLUMNS} FROM products ORDER BY id LIMIT ? OFFSET ?", (size, offset))
    return {"page": page, "size": size, "items": rows}


@app.get("/search")
def search(q: str = Query(..., min_length=1), limit: int = Query(10, le=50)) -> dict:
    rows = db.query(
        f"SELECT {PRODUCT_COLUMNS} FROM products WHERE name LIKE ? ORDER BY rating DESC LIMIT ?",
        (f"%{q}%", limit),
    )
    trace.get_current_span().set_attribute("shop.search.results", len(rows))
    return {"query": q, "items": rows}


@app.get("/products/{product_id}")
def get_product(product_id: int) -> dict:
    rows = db.query(f"SELECT {PRODUCT_COLUMNS}, description FROM products WHERE id = ?", (product_id,))
    if not rows:
        raise HTTPException(status_code=404, detail="product not found")
    return rows[0]


@app.get("/stats")
def stats() -> dict:
    rows = db.query("SELECT * FROM products")
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["category"]].append(row)
    result = []
    for category, items in sorted(grouped.items()):
        result.append(
            {
                "category": category,
                "products": len(items),
                "in_stock": sum(1 for i in items if i["stock"] > 0),
                "avg_price": round(sum(i["price"] for i in items) / len(items), 2),
                "avg_rating": round(sum(i["rating"] for i in items) / len(items), 2),
            }
        )
    payload_bytes = len(json.dumps(rows, indent=2))
    log.info("stats computed", extra={"shop.stats.categories": len(result), "shop.stats.payload_bytes": payload_bytes})
    return {"categories": result}


@app.post("/orders")
def place_order(order: OrderIn) -> dict:
    span = trace.get_current_span()
    span.set_attribute("shop.order.product_id", order.product_id)
    span.set_attribute("shop.order.quantity", order.quantity)
    conn = db.connect()
    try:
        count = conn.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
        order_ref = f"ORD-{count + 1:06d}"
        product = conn.execute(
            "SELECT id, name, category, price, stock FROM products WHERE id = ?", (order.product_id,)
        ).fetchone()
        if product is None:
            log.warning("order rejected: unknown product", extra={"order.product_id": order.product_id})
            return {"error": "unknown product", "product_id": order.product_id}
        product = dict(product)
        if product["stock"] < order.quantity:
            log.warning(
                "order rejected: insufficient stock",
                extra={"order.product_id": order.product_id, "order.quantity": order.quantity},
            )
            return {"error": "insufficient stock", "product_id": order.product_id}
        total = round(product["price"] * order.quantity, 2)
        authorize_payment(total)
        conn.execute("UPDATE products SET stock = stock - ? WHERE id = ?", (order.quantity, order.product_id))
        conn.execute(
            "INSERT INTO orders (order_ref, product_id, quantity, total) VALUES (?, ?, ?, ?)",
            (order_ref, order.product_id, order.quantity, total),
        )
        conn.commit()
    finally:
        conn.close()
    span.set_attribute("shop.order.ref", order_ref)
    orders_placed.add(1, {"product.category": product.get("category_name", "general")})
    order_units.add(order.quantity)
    log.info("order placed", extra={"shop.order.ref": order_ref, "shop.order.quantity": order.quantity})
    return {"order_ref": order_ref, "product_id": order.product_id, "quantity": order.quantity, "total": total}


@app.get("/orders/{order_ref}")
def get_order(order_ref: str) -> dict:
    rows = db.query(
        "SELECT order_ref, product_id, quantity, total, created_at FROM orders WHERE order_ref = ? ORDER BY id",
        (order_ref,),
        table="orders",
    )
    if not rows:
        return {"error": "order not found", "order_ref": order_ref}
    return rows[0]
