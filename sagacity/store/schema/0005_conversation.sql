-- Agent conversations, kept out of Temporal's history: each model call stores only what is new
-- since the last one (`items`, a JSON list) on top of the version it extends (`base_hash`), and
-- the workflow holds the newest version's hash. A version is named by its hash, so a reset run
-- that takes the conversation another way adds versions beside the old ones. Insert-only.

CREATE TABLE IF NOT EXISTS sagacity_conversation (
    saga_id     TEXT        NOT NULL,
    hash        CHAR(64)    NOT NULL,
    base_hash   CHAR(64),
    items       TEXT        NOT NULL,
    length      INTEGER     NOT NULL,
    created_at  TIMESTAMP   NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    PRIMARY KEY (saga_id, hash)
);
