-- Seed data of the quickstart-single shop database: examples/quickstart/db/seed.redis as SQL
-- (6 users, 34 orders, the same totals). Loaded at image build time into
-- /var/lib/shop/shop.db (see the Dockerfile).
BEGIN;
CREATE TABLE users (
  name        TEXT PRIMARY KEY
);
CREATE TABLE orders (
  id          INTEGER PRIMARY KEY,  -- ascending ids: a user's orders oldest first
  user        TEXT NOT NULL,
  sku         TEXT NOT NULL,
  qty         INTEGER NOT NULL,     -- units
  price_cents INTEGER NOT NULL,     -- per unit
  placed_at   TEXT NOT NULL
);
CREATE INDEX orders_by_user ON orders (user, id);
INSERT INTO users (name) VALUES ('alice'), ('bob'), ('carol'), ('dave'), ('erin'), ('frank');
INSERT INTO orders (id, user, sku, qty, price_cents, placed_at) VALUES
  (1001, 'alice', 'NOTE-044', 4, 349, '2024-05-17'),
  (1002, 'alice', 'PEN-007', 1, 199, '2024-05-20'),
  (1003, 'alice', 'DESK-900', 4, 18900, '2024-05-26'),
  (1004, 'alice', 'DESK-900', 1, 18900, '2024-05-24'),
  (1005, 'alice', 'MUG-220', 1, 850, '2024-05-24'),
  (1006, 'alice', 'LAMP-330', 1, 4599, '2024-05-22'),
  (1007, 'alice', 'TEA-618', 5, 525, '2024-05-15'),
  (1008, 'bob', 'PEN-007', 1, 199, '2024-05-10'),
  (1009, 'bob', 'SOCK-412', 4, 699, '2024-05-07'),
  (1010, 'bob', 'CABLE-515', 1, 1150, '2024-05-08'),
  (1011, 'bob', 'CABLE-515', 1, 1150, '2024-05-14'),
  (1012, 'bob', 'CABLE-515', 2, 1150, '2024-05-07'),
  (1013, 'bob', 'LAMP-330', 4, 4599, '2024-05-09'),
  (1014, 'bob', 'PEN-007', 1, 199, '2024-05-10'),
  (1015, 'carol', 'LAMP-330', 3, 4599, '2024-05-15'),
  (1016, 'carol', 'BOOK-101', 4, 1299, '2024-05-17'),
  (1017, 'carol', 'TEA-618', 5, 525, '2024-05-15'),
  (1018, 'carol', 'PEN-007', 1, 199, '2024-05-11'),
  (1019, 'dave', 'MUG-220', 5, 850, '2024-05-22'),
  (1020, 'dave', 'SOCK-412', 3, 699, '2024-05-15'),
  (1021, 'dave', 'SOCK-412', 5, 699, '2024-05-08'),
  (1022, 'dave', 'DESK-900', 3, 18900, '2024-05-20'),
  (1023, 'dave', 'NOTE-044', 3, 349, '2024-05-16'),
  (1024, 'dave', 'PEN-007', 3, 199, '2024-05-26'),
  (1025, 'dave', 'BAG-271', 2, 3275, '2024-05-11'),
  (1026, 'erin', 'PEN-007', 1, 199, '2024-05-23'),
  (1027, 'erin', 'BOOK-101', 1, 1299, '2024-05-12'),
  (1028, 'erin', 'BAG-271', 2, 3275, '2024-05-16'),
  (1029, 'frank', 'SOCK-412', 1, 699, '2024-05-27'),
  (1030, 'frank', 'SOCK-412', 2, 699, '2024-05-08'),
  (1031, 'frank', 'BAG-271', 5, 3275, '2024-05-24'),
  (1032, 'frank', 'SOCK-412', 1, 699, '2024-05-13'),
  (1033, 'frank', 'SOCK-412', 4, 699, '2024-05-26'),
  (1034, 'frank', 'TEA-618', 1, 525, '2024-05-27');
COMMIT;
