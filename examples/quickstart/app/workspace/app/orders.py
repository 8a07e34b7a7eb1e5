"""Order totals for the shop API.

Data model (Redis, see the `db` service):
  orders:<user>   LIST of order ids, oldest first
  order:<id>      HASH user, sku, qty (units), price_cents (per unit), placed_at
"""
import os

from resp import Redis


def connect():
    return Redis(os.environ.get("REDIS_HOST", "db"), int(os.environ.get("REDIS_PORT", "6379")))


def user_orders(db, user):
    orders = []
    for order_id in db.call("LRANGE", "orders:" + user, 0, -1):
        fields = db.call("HGETALL", "order:" + order_id)
        orders.append(dict(zip(fields[0::2], fields[1::2])))
    return orders


def format_cents(cents):
    return "%d.%02d" % (cents // 100, cents % 100)


def total(user):
    """What the user has spent: every order line is qty units at price_cents each."""
    with connect() as db:
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
    with connect() as db:
        return db.call("PING") == "PONG"
