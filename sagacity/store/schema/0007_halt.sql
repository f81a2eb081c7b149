-- Operator halts (the kill switch) and quarantines. A halt is one row, kept after it is lifted:
-- who halted what, why, under which policy, signed; and who lifted it, why, signed.
--
-- Workers never read halts one by one. The active ones are folded into the single row of
-- sagacity_halt_gate, which every INTENT insert reads through sagacity_halted() in the statement
-- that writes it. That function first takes the gate's advisory lock shared, and a halt takes it
-- exclusively while it writes: so each INTENT either commits before the halt does, or waits for
-- it and then reads the gate afresh (a VOLATILE function's query takes a new snapshot). No
-- INTENT can follow a halt that covers it. An advisory lock lives in memory only: a row lock
-- would write to the gate's page, and make a multixact, with every INTENT.

CREATE TABLE IF NOT EXISTS sagacity_halt (
    id              BIGSERIAL   PRIMARY KEY,
    kind            TEXT        NOT NULL CHECK (kind IN ('halt', 'quarantine')),
    -- {"tool": …, "task_queue": …, "sagas": […]}: every key present narrows; {} is everything
    scope           JSONB       NOT NULL,
    policy          TEXT        NOT NULL CHECK (policy IN ('keep', 'compensate')),
    reason          TEXT        NOT NULL,
    operator        TEXT        NOT NULL,
    halted_at       TIMESTAMP   NOT NULL,
    -- the signed statement (sagacity.evidence.decisions.Signature as JSON), NULL: unsigned
    signature       JSONB,
    -- the blast radius at halt time: every live effect in the sagas the halt reached, signed
    report          JSONB,
    lifted_at       TIMESTAMP,
    lifted_by       TEXT,
    lift_reason     TEXT,
    lift_signature  JSONB,
    -- what the gate and every reader can take: a scope of known keys, each of its type
    CONSTRAINT halt_scope_shape CHECK (
        jsonb_typeof(scope) = 'object'
        AND scope - 'tool' - 'task_queue' - 'sagas' = '{}'::jsonb
        AND (NOT scope ? 'tool' OR jsonb_typeof(scope -> 'tool') = 'string')
        AND (NOT scope ? 'task_queue' OR jsonb_typeof(scope -> 'task_queue') = 'string')
        AND (NOT scope ? 'sagas' OR (jsonb_typeof(scope -> 'sagas') = 'array'
                                     AND jsonb_array_length(scope -> 'sagas') > 0))
    ),
    CONSTRAINT halt_reason_length CHECK (length(reason) BETWEEN 1 AND 2000),
    CONSTRAINT halt_operator_length CHECK (length(operator) BETWEEN 1 AND 200)
);

CREATE INDEX IF NOT EXISTS idx_halt_active ON sagacity_halt (id) WHERE lifted_at IS NULL;

CREATE TABLE IF NOT EXISTS sagacity_halt_gate (
    id      INT     PRIMARY KEY CHECK (id = 1),
    -- the active halts as the INTENT check reads them: [{"id", "tool", "task_queue", "sagas",
    -- "compensations"}], rewritten by every halt and lift
    halts   JSONB   NOT NULL DEFAULT '[]'
);

INSERT INTO sagacity_halt_gate (id, halts) VALUES (1, '[]') ON CONFLICT (id) DO NOTHING;

-- The halt covering a call of p_tool in saga p_saga by a worker of p_task_queue, or NULL; with
-- p_compensation, the halt that makes its compensation wait (a `keep` one). The lock key
-- (0x5A6C, 1) is sagacity.store.halts.GATE_LOCK.
CREATE OR REPLACE FUNCTION sagacity_halted(
    p_saga TEXT, p_tool TEXT, p_task_queue TEXT, p_compensation BOOLEAN DEFAULT false
)
RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    found BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(23148, 1);
    SELECT (h ->> 'id')::BIGINT INTO found
    FROM sagacity_halt_gate AS g, jsonb_array_elements(g.halts) AS h
    WHERE g.id = 1
      AND (NOT h ? 'tool' OR h ->> 'tool' = p_tool)
      AND (NOT h ? 'task_queue' OR h ->> 'task_queue' = p_task_queue)
      AND (NOT h ? 'sagas' OR h -> 'sagas' ? p_saga)
      AND NOT (p_compensation AND (h ->> 'compensations')::BOOLEAN)
    LIMIT 1;
    RETURN found;
END
$$;
