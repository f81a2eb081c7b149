-- The transparency log over the journal (docs/evidence.md, "Transparency log"): its leaves, one
-- per journal row in the order the sequencer appended them, and the hashes of its complete
-- subtrees, by (level, index), from which proofs are read. Insert-only: neither ever changes
-- once written, and the signed tree heads kept outside the database say what they must hold.

CREATE TABLE IF NOT EXISTS sagacity_tlog_leaf (
    idx       BIGINT    PRIMARY KEY,
    saga_id   TEXT      NOT NULL,
    seq       BIGINT    NOT NULL,
    row_hash  TEXT      NOT NULL,
    UNIQUE (saga_id, seq)
);

CREATE TABLE IF NOT EXISTS sagacity_tlog_node (
    level  SMALLINT  NOT NULL,
    idx    BIGINT    NOT NULL,
    hash   BYTEA     NOT NULL,
    PRIMARY KEY (level, idx)
);
