-- The approvals inbox reads waiting requests a page at a time, oldest first, by tool or not, and
-- shows each one's deadline without asking its saga: `expires_at` is when the saga rejects the
-- call as timed out (NULL: rows written before this column, or a saga that waits forever).

ALTER TABLE sagacity_approval_request ADD COLUMN IF NOT EXISTS expires_at TIMESTAMP;

CREATE INDEX IF NOT EXISTS idx_approval_request_age
    ON sagacity_approval_request (created_at, saga_id, journal_seq);

CREATE INDEX IF NOT EXISTS idx_approval_request_tool_age
    ON sagacity_approval_request (tool_name, created_at, saga_id, journal_seq);
