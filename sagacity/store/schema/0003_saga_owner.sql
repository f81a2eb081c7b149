-- Which workflow run chain owns each saga's journal: one saga id, one journal. The first run to
-- write claims the id; a reset, a retry or continue-as-new keeps the chain's first run id and
-- continues the journal, while a new run under a reused id is refused. Insert-only.

CREATE TABLE IF NOT EXISTS sagacity_saga_owner (
    saga_id       TEXT        PRIMARY KEY,
    workflow_id   TEXT        NOT NULL,
    first_run_id  TEXT        NOT NULL,
    claimed_at    TIMESTAMP   NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
