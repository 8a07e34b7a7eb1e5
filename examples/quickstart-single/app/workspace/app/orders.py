"""Order totals for the shop API.

Data model (SQLite, the file $SHOP_DB, default /var/lib/shop/shop.db):
  users    name
  orders   id (ascending: oldest first), user, sku, qty (units), price_cents (per unit),
           placed_at
"""
import os
import sqlite3
from contextlib import closing


def connect():
    path = os.environ.get("SHOP_DB", "/var/lib/shop/shop.db")
    # mode=rw: a missing database is an error, not a new empty file.
    db = sqlite3.connect("file:%s?mode=rw" % path, uri=True)
    db.row_factory = sqlite3.Row
    return db


def user_orders(db, user):
    return db.execute("SELECT * FROM orders WHERE user = ? ORDER BY id", (user,)).fetchall()


def format_cents(cents):
    return "%d.%02d" % (cents // 100, cents % 100)


def total(user):
    """What the user has spent: every order line is qty units at price_cents each."""
    with closing(connect()) as db:
        orders = user_orders(db, user)
    total_cents = 0
    for order in orders:
        total_cents += int(order["price_cents"])
    return {
        "user": user,
        "orders": len(orders),
        "total_cents": total_cents,
        "total": format_cents(total_cents),
    }


def ping():
    """True when the database opens and holds the orders table; raises otherwise."""
    with closing(connect()) as db:
        db.execute("SELECT 1 FROM orders LIMIT 1").fetchall()
    return True
