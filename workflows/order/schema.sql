-- The Order / Product / Inventory example's own tables: every effect and every undo shows here.
CREATE TABLE IF NOT EXISTS inventory (
    product_id  TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    available   INTEGER NOT NULL CHECK (available >= 0)
);

CREATE TABLE IF NOT EXISTS reservations (
    id          TEXT PRIMARY KEY,
    product_id  TEXT NOT NULL REFERENCES inventory (product_id),
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    status      TEXT NOT NULL,              -- held | released
    saga_id     TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS orders (
    id              TEXT PRIMARY KEY,
    product_id      TEXT NOT NULL REFERENCES inventory (product_id),
    quantity        INTEGER NOT NULL,
    reservation_id  TEXT REFERENCES reservations (id),
    status          TEXT NOT NULL,          -- placed | cancelled
    saga_id         TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS outbox (
    id          BIGSERIAL PRIMARY KEY,
    order_id    TEXT NOT NULL,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    saga_id     TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'utc')
);

-- Injected faults, so demos and tests can make a step fail, hang or keep failing.
CREATE TABLE IF NOT EXISTS order_faults (
    tool_name   TEXT PRIMARY KEY,
    remaining   INTEGER NOT NULL,           -- how many more calls fail; -1 = every call
    message     TEXT NOT NULL,
    delay_s     DOUBLE PRECISION NOT NULL DEFAULT 0
);
