#!/bin/bash
# PostgreSQL with its cluster in /data/pg. On the first start (no /data/.seeded) it initialises
# the cluster and loads the shop (SHOP_ORDERS orders, indexed and analysed) through a private
# server that listens on a unix socket only, then starts the real one: the service never
# accepts a TCP connection before its data is complete. A load cut short is started over.
set -euo pipefail
BIN=/usr/lib/postgresql/15/bin
PGDATA=/data/pg
ORDERS=${SHOP_ORDERS:-6000000}
if [ ! -e /data/.seeded ]; then
  rm -rf "$PGDATA"
  "$BIN/initdb" -D "$PGDATA" -U shop --auth=trust -E UTF8 --no-instructions >/dev/null
  echo "host all all all trust" >> "$PGDATA/pg_hba.conf"
  # The load writes no WAL (table created in the same transaction, wal_level=minimal); the
  # stop at the end is a clean shutdown with a checkpoint, so the real server starts at once.
  "$BIN/pg_ctl" -D "$PGDATA" -w -s start -o "-c listen_addresses='' -k /tmp \
    -c wal_level=minimal -c max_wal_senders=0 -c maintenance_work_mem=128MB"
  psql -h /tmp -U shop -d postgres -v ON_ERROR_STOP=1 -q -v orders="$ORDERS" <<'SQL'
BEGIN;
CREATE TABLE orders (
  id integer PRIMARY KEY,
  customer text NOT NULL,
  cents integer NOT NULL,
  placed_at timestamptz NOT NULL
);
INSERT INTO orders
SELECT i,
       (ARRAY['ada', 'bob', 'cyd', 'dee', 'eve', 'fay', 'gus', 'hal'])[1 + (i * 7919) % 8],
       1 + (i * 104729) % 10000,
       timestamptz '2026-01-01' + (i % 525600) * interval '1 minute'
FROM generate_series(1::bigint, :orders) AS i;
CREATE INDEX orders_customer ON orders (customer);
CREATE INDEX orders_placed_at ON orders (placed_at);
COMMIT;
ANALYZE orders;
SQL
  "$BIN/pg_ctl" -D "$PGDATA" -m fast -w -s stop
  touch /data/.seeded
fi
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' -k /tmp
