-- The halt gate in the database. Until now the halt check was part of the one statement workers
-- write INTENT rows with (0007): a row inserted any other way (SQL typed as the application role,
-- another tool, a worker of an older release) went in under a halt. A trigger on the journal now
-- refuses every INTENT row a halt in force covers, whatever statement writes it.
--
-- What it matches: sagacity_halted's predicate, the one the gate row is folded for. A halt's
-- saga and tool scope are read from the row itself. The task queue is not in the row: the
-- writer names it in the transaction-local setting sagacity.task_queue (Sagacity's insert sets
-- it in the same statement). A writer that names none is covered by every task-queue halt: a
-- row of unknown origin is held rather than let through. A writer may name another task queue,
-- so a task-queue scope binds what the writer says, a saga or tool scope binds the row.
--
-- Concurrency, as in 0007: sagacity_halted takes the gate's advisory lock shared, and a halt
-- takes it exclusively while it writes and folds, so an INTENT commits before the halt does, or
-- waits for it and then reads the gate afresh. Afresh holds at READ COMMITTED, where each query
-- in a function takes a new snapshot. A transaction at REPEATABLE READ or SERIALIZABLE reads
-- with the snapshot of its first statement, which may predate a halt committed since: for such
-- a writer the trigger also locks the gate row (FOR SHARE, in sagacity_gate_current, which runs
-- as the owner: a row lock needs UPDATE rights the application role has not), and PostgreSQL
-- refuses that lock with a serialization failure (40001) when the row changed after the
-- snapshot. The transaction writes nothing and is retried with a new snapshot. Anyone may call
-- that function: holding its lock, like holding the advisory lock, only makes a halt wait, and
-- a halt gives up after 5 s naming the session. Writers at READ
-- COMMITTED (all of Sagacity's) take no row lock: it would write to the gate's page with every
-- INTENT.
--
-- Who can undo it: the trigger and its functions belong to the role running the migrations, the
-- table's owner. Disabling or dropping a trigger takes the table's ownership, and skipping
-- triggers (session_replication_role) a superuser: the application role has neither. The
-- functions pin their search_path, so no function or operator a session puts ahead of pg_catalog
-- changes what they compute. A refusal is SQLSTATE SGHLT, the halt's id in DETAIL
-- (sagacity.store.journal maps it to the typed Halted error).
--
-- Compensations: a COMPENSATED row is not refused here. It records an undo that already ran; a
-- refusal would hide a change in the world, and the attempt's retry would undo again. Under a
-- `keep` halt the compensation activity checks the halts before it runs the undo.

DO $do$
BEGIN
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION %1$I.sagacity_halted(
    p_saga TEXT, p_tool TEXT, p_task_queue TEXT, p_compensation BOOLEAN DEFAULT false
)
RETURNS BIGINT LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
    found BIGINT;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(23148, 1);
    SELECT (h ->> 'id')::BIGINT INTO found
    FROM %1$I.sagacity_halt_gate AS g, pg_catalog.jsonb_array_elements(g.halts) AS h
    WHERE g.id = 1
      AND (NOT h ? 'tool' OR h ->> 'tool' = p_tool)
      -- NULL: the writer did not say (the trigger's case), held by every task-queue halt
      AND (NOT h ? 'task_queue' OR p_task_queue IS NULL OR h ->> 'task_queue' = p_task_queue)
      AND (NOT h ? 'sagas' OR h -> 'sagas' ? p_saga)
      AND NOT (p_compensation AND (h ->> 'compensations')::BOOLEAN)
    LIMIT 1;
    RETURN found;
END
$body$;

CREATE OR REPLACE FUNCTION %1$I.sagacity_gate_current()
RETURNS VOID LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    PERFORM FROM %1$I.sagacity_halt_gate WHERE id = 1 FOR SHARE;
END
$body$;

CREATE OR REPLACE FUNCTION %1$I.sagacity_intent_gate()
RETURNS trigger LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
    halt BIGINT;
BEGIN
    halt := %1$I.sagacity_halted(
        NEW.saga_id, NEW.tool_name,
        NULLIF(pg_catalog.current_setting('sagacity.task_queue', true), ''));
    IF halt IS NULL
       AND pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM %1$I.sagacity_gate_current();
    END IF;
    IF halt IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'SGHLT',
            MESSAGE = pg_catalog.format(
                'halt %%s covers this INTENT (saga %%s, tool %%s): nothing was written',
                halt, NEW.saga_id, NEW.tool_name),
            DETAIL = halt::TEXT,
            HINT = 'see `sagacity halts`; the call may run once the halt is lifted';
    END IF;
    RETURN NEW;
END
$body$;

CREATE OR REPLACE TRIGGER sagacity_intent_gate
    BEFORE INSERT ON %1$I.side_effect_journal
    FOR EACH ROW WHEN (NEW.phase = 'INTENT')
    EXECUTE FUNCTION %1$I.sagacity_intent_gate();
$sql$, current_schema());
END
$do$;
