-- Escalation past a request's SLA: when its saga notified the next tier (escalated_at, the
-- saga's time), where (escalated_to: the webhook's scheme and host, never its secret path), how
-- it went (escalation_state: posting, sent, failed, unknown, recorded), after how many attempts,
-- and the last failure. The claim that lets one attempt post is an UPDATE of this row, which the
-- app role may already do (grants.sql): working state, like the rest of the row.

ALTER TABLE sagacity_approval_request
    ADD COLUMN IF NOT EXISTS escalated_at TIMESTAMP,
    ADD COLUMN IF NOT EXISTS escalated_to TEXT,
    ADD COLUMN IF NOT EXISTS escalation_state TEXT,
    ADD COLUMN IF NOT EXISTS escalation_attempts INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS escalation_error TEXT;
