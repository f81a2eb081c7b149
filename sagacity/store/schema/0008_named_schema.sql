-- Sagacity's statements name the schema the journal is in (sagacity/store/placement.py), never
-- trusting a session's search_path: the application role's own schema comes first on its path,
-- and it may create tables there. The halt gate's function still read its table by the caller's
-- path, so a sagacity_halt_gate the application role made in its own schema, holding no halts,
-- would have let every INTENT through. It is recreated naming its table in the schema the
-- migrations run in (the migrator sets search_path to it), and pg_catalog for what it calls.

DO $do$
BEGIN
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION %1$I.sagacity_halted(
    p_saga TEXT, p_tool TEXT, p_task_queue TEXT, p_compensation BOOLEAN DEFAULT false
)
RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    found BIGINT;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(23148, 1);
    SELECT (h ->> 'id')::BIGINT INTO found
    FROM %1$I.sagacity_halt_gate AS g, pg_catalog.jsonb_array_elements(g.halts) AS h
    WHERE g.id = 1
      AND (NOT h ? 'tool' OR h ->> 'tool' = p_tool)
      AND (NOT h ? 'task_queue' OR h ->> 'task_queue' = p_task_queue)
      AND (NOT h ? 'sagas' OR h -> 'sagas' ? p_saga)
      AND NOT (p_compensation AND (h ->> 'compensations')::BOOLEAN)
    LIMIT 1;
    RETURN found;
END
$body$
$sql$, current_schema());
END
$do$;
