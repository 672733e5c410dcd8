"""Builds the seeded SQLite catalog the API serves."""

from __future__ import annotations

import random
import sqlite3

CATEGORIES = [
    "kitchen", "garden", "office", "toys", "books", "audio",
    "lighting", "outdoor", "bath", "pets", "tools", "sports",
]
ADJECTIVES = ["Classic", "Compact", "Deluxe", "Eco", "Smart", "Rustic", "Modern", "Portable", "Premium", "Basic"]
NOUNS = {
    "kitchen": ["Kettle", "Mug", "Pan", "Knife", "Blender"],
    "garden": ["Hose", "Planter", "Rake", "Shears", "Seeds"],
    "office": ["Chair", "Desk", "Stapler", "Notebook", "Monitor Arm"],
    "toys": ["Puzzle", "Robot", "Kite", "Blocks", "Doll"],
    "books": ["Cookbook", "Novel", "Atlas", "Guide", "Journal"],
    "audio": ["Headphones", "Speaker", "Turntable", "Microphone", "Radio"],
    "lighting": ["Lamp", "Lantern", "Bulb", "Spotlight", "String Lights"],
    "outdoor": ["Tent", "Backpack", "Cooler", "Hammock", "Stove"],
    "bath": ["Towel", "Mirror", "Scale", "Robe", "Soap Dish"],
    "pets": ["Leash", "Bowl", "Bed", "Brush", "Feeder"],
    "tools": ["Drill", "Hammer", "Wrench", "Saw", "Level"],
    "sports": ["Ball", "Racket", "Yoga Mat", "Helmet", "Bottle"],
}
WORDS = (
    "durable lightweight everyday reliable sturdy elegant practical versatile handy quiet "
    "efficient comfortable washable recycled stainless adjustable foldable cordless classic warm"
).split()

SCHEMA = """
CREATE TABLE IF NOT EXISTS products (
    id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL,
    name TEXT NOT NULL,
    category TEXT NOT NULL,
    price REAL NOT NULL,
    stock INTEGER NOT NULL,
    rating REAL NOT NULL,
    description TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS products_category ON products (category);
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    order_ref TEXT NOT NULL,
    product_id INTEGER NOT NULL,
    quantity INTEGER NOT NULL,
    total REAL NOT NULL,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
"""


def build(path: str, size: int = 3000, seed: int = 20260911) -> None:
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    try:
        conn.executescript("DROP TABLE IF EXISTS products; DROP TABLE IF EXISTS orders;" + SCHEMA)
        rows = []
        for pid in range(1, size + 1):
            category = CATEGORIES[(pid - 1) % len(CATEGORIES)]
            name = f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS[category])}"
            description = " ".join(rng.choice(WORDS) for _ in range(60))
            rows.append(
                (
                    pid,
                    f"SKU-{pid:05d}",
                    name,
                    category,
                    round(rng.uniform(3, 400), 2),
                    rng.choice([0, 1, 2, 3, 5, 8, 20, 50, 120, 400]),
                    round(rng.uniform(1, 5), 1),
                    description,
                )
            )
        conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.commit()
    finally:
        conn.close()
