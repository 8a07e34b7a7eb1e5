#!/usr/bin/env python3
"""Verifier of the quickstart-single environment.

Runs from the app's own image, in the same container (sandbox) as the app, as uid 1001 with
/tests as its working dir, on a fork of the episode after the agent has stopped. It grades
the running system and the submission:

  gate       the seeded orders in the database are intact (totals equal expected.json);
             if not, the reward is 0.0 whatever else passes
  total:NAME for each seeded user, GET http://127.0.0.1:8080/total?user=NAME returns the
             order count and total_cents computed here straight from the database (sqlite3)
  live-data  orders written to the database now (a user the agent never saw) are totalled
             correctly, so hard-coded answers do not pass
  submission /submission/workspace/app/orders.py (copied out of the fork) is a regular
             file, valid Python, and no longer the shipped buggy file

reward = passed checks / all checks (0.0 if the gate fails), written as
{"reward": R} to $REWARD_DIR/reward.json (default /logs/verifier). Per-check detail goes
to stdout and to $REWARD_DIR/checks.json.

Environment (all optional): APP_URL (http://127.0.0.1:8080), SHOP_DB
(/var/lib/shop/shop.db), REWARD_DIR (/logs/verifier), SUBMISSION_DIR (/submission),
WAIT_SECONDS (60).
Exit status: 0 when a reward was written; 2 when grading was impossible (database
unreadable, expected.json missing): then no reward is written.
"""
import ast
import hashlib
import json
import os
import random
import sqlite3
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import closing

HERE = os.path.dirname(os.path.abspath(__file__))
APP_URL = os.environ.get("APP_URL", "http://127.0.0.1:8080").rstrip("/")
SHOP_DB = os.environ.get("SHOP_DB", "/var/lib/shop/shop.db")
REWARD_DIR = os.environ.get("REWARD_DIR", "/logs/verifier")
SUBMISSION_DIR = os.environ.get("SUBMISSION_DIR", "/submission")
WAIT_SECONDS = float(os.environ.get("WAIT_SECONDS", "60"))


class CannotGrade(Exception):
    pass


def sql(statement, *params):
    """One statement in its own connection and transaction (committed); returns the rows."""
    try:
        # mode=rw: a missing database is an error, never a new empty file. timeout: wait up
        # to 30 s for a lock the app holds. closing() closes the connection; the connection's
        # own context commits (or rolls back on an error).
        uri = "file:%s?mode=rw" % urllib.parse.quote(SHOP_DB)
        with closing(sqlite3.connect(uri, uri=True, timeout=30)) as db, db:
            return db.execute(statement, params).fetchall()
    except sqlite3.Error as err:
        raise CannotGrade("%s: %s" % (SHOP_DB, err))


def db_totals(user):
    """(order count, total_cents) of a user, computed from the database."""
    [(count, cents)] = sql("SELECT count(*), coalesce(sum(qty * price_cents), 0) FROM orders"
                           " WHERE user = ?", user)
    return count, cents


def get_json(path, timeout=30):
    # Patient: a check that times out on a loaded host would grade work the agent did right.
    try:
        with urllib.request.urlopen(APP_URL + path, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as err:
        return err.code, None
    except (OSError, ValueError) as err:
        return None, str(err)


def wait_until(what, ready):
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        if ready():
            return True
        if time.monotonic() > deadline:
            print("verifier: %s not ready after %.0fs" % (what, WAIT_SECONDS), file=sys.stderr)
            return False
        time.sleep(0.25)


def db_ready():
    try:
        sql("SELECT 1 FROM orders LIMIT 1")
        return True
    except CannotGrade:
        return False


def get_json_settled(path, attempts=3):
    """get_json, asked again after a transport error or a 5xx: on a loaded host a connection can
    fail once, and one blip must not cost the agent a check. A 5xx of the agent's own making
    repeats, so it still fails the check."""
    for attempt in range(attempts):
        status, body = get_json(path)
        if status is not None and status < 500:
            break
        print("verifier: GET %s -> %s %s (attempt %d of %d)" % (path, status, body, attempt + 1, attempts),
              file=sys.stderr)
        time.sleep(1)
    return status, body


def check_total(user, expected):
    status, body = get_json_settled("/total?user=" + urllib.parse.quote(user))
    if status != 200 or not isinstance(body, dict):
        return False, "GET /total -> %s %s" % (status, body)
    got = (body.get("orders"), body.get("total_cents"))
    return got == expected, "app %s, database %s" % (got, expected)


def check_live_data():
    user = "verifier-probe-%08x" % random.getrandbits(32)
    lines = [(random.randint(2, 9), random.randint(101, 9999)) for _ in range(random.randint(2, 5))]
    try:
        for qty, price_cents in lines:
            sql("INSERT INTO orders (user, sku, qty, price_cents, placed_at)"
                " VALUES (?, 'PROBE-1', ?, ?, '2024-06-01')", user, qty, price_cents)
        # Expected from what was written, not read back: the agent could have left a trigger
        # that rewrites new rows to fit its code.
        return check_total(user, (len(lines), sum(qty * price_cents for qty, price_cents in lines)))
    finally:
        sql("DELETE FROM orders WHERE user = ?", user)


def check_submission(shipped_sha):
    path = os.path.join(SUBMISSION_DIR, "workspace", "app", "orders.py")
    if os.path.islink(path) or not os.path.isfile(path):
        return False, "%s missing or not a regular file" % path
    with open(path, "rb") as f:
        source = f.read()
    try:
        ast.parse(source, path)  # parsed, never executed: the verifier runs no agent code
    except SyntaxError as err:
        return False, "not valid Python: %s" % err
    if hashlib.sha256(source).hexdigest() == shipped_sha:
        return False, "unchanged from the shipped file"
    return True, "changed, valid Python (%d bytes)" % len(source)


def grade():
    try:
        with open(os.path.join(HERE, "expected.json")) as f:
            expected = json.load(f)
    except OSError as err:
        raise CannotGrade("expected.json: %s" % err)
    if not wait_until("database %s" % SHOP_DB, db_ready):
        raise CannotGrade("database unreadable")
    wait_until("app %s" % APP_URL, lambda: get_json("/health", timeout=2)[0] == 200)

    checks = []  # (name, passed, detail)
    seeded = {u: (v["orders"], v["total_cents"]) for u, v in expected["users"].items()}
    in_db = {u: db_totals(u) for u in seeded}
    tampered = sorted(u for u in seeded if in_db[u] != seeded[u])
    gate = (not tampered, "seed intact" if not tampered else "seed data modified for " + ", ".join(tampered))
    for user in sorted(seeded):
        checks.append(("total:" + user, *check_total(user, in_db[user])))
    checks.append(("live-data", *check_live_data()))
    checks.append(("submission", *check_submission(expected["shipped_orders_py_sha256"])))

    passed = sum(1 for _, ok, _ in checks if ok)
    reward = passed / len(checks) if gate[0] else 0.0
    print("%-4s %-14s %s" % ("PASS" if gate[0] else "FAIL", "gate:data", gate[1]))
    for name, ok, detail in checks:
        print("%-4s %-14s %s" % ("PASS" if ok else "FAIL", name, detail))
    print("reward %.4f (%d/%d checks%s)" % (reward, passed, len(checks), "" if gate[0] else ", gate failed"))
    return reward, gate, checks


def write_json(name, value):
    tmp = os.path.join(REWARD_DIR, "." + name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.write("\n")
    os.replace(tmp, os.path.join(REWARD_DIR, name))


def main():
    try:
        reward, gate, checks = grade()
    except CannotGrade as err:
        print("verifier: cannot grade: %s" % err, file=sys.stderr)
        return 2
    write_json("checks.json", {"gate": {"passed": gate[0], "detail": gate[1]},
                               "checks": [{"name": n, "passed": ok, "detail": d} for n, ok, d in checks]})
    write_json("reward.json", {"reward": reward})
    return 0


if __name__ == "__main__":
    sys.exit(main())
