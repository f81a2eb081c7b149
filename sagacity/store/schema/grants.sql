-- The application role: append-only on the journal, read-write on approval requests.
-- A template: `sagacity db grants [--role NAME]` fills in {role}. Re-running it is harmless.

DO $$
BEGIN
    CREATE ROLE {role} LOGIN;
EXCEPTION
    -- already there (unique_violation: another session created it at the same moment)
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

-- The journal is append-only by permission, not only by intent. TRUNCATE would empty it
-- without a DELETE, so it goes too.
REVOKE UPDATE, DELETE, TRUNCATE ON side_effect_journal FROM {role};
GRANT INSERT, SELECT ON side_effect_journal TO {role};

-- Approval requests are working state: rows are replaced on re-request and deleted once decided.
GRANT SELECT, INSERT, UPDATE, DELETE ON sagacity_approval_request TO {role};

-- Saga ownership is claimed once and never changed.
REVOKE UPDATE, DELETE, TRUNCATE ON sagacity_saga_owner FROM {role};
GRANT INSERT, SELECT ON sagacity_saga_owner TO {role};

-- The transparency log's leaves and subtree hashes are written once and never changed.
REVOKE UPDATE, DELETE, TRUNCATE ON sagacity_tlog_leaf, sagacity_tlog_node FROM {role};
GRANT INSERT, SELECT ON sagacity_tlog_leaf, sagacity_tlog_node TO {role};

-- Conversation versions are written once and never changed.
REVOKE UPDATE, DELETE, TRUNCATE ON sagacity_conversation FROM {role};
GRANT INSERT, SELECT ON sagacity_conversation TO {role};

-- A schema of the role's own, named after it, for an app's own tables (the Order example's
-- shop): "$user" comes first in the default search_path, so the app creates its tables there
-- and needs no CREATE on public, as PostgreSQL's "secure schema usage pattern" advises. The
-- migrator owns the schema; the role owns only the tables it creates in it. A table it makes
-- there under one of Sagacity's names changes nothing Sagacity does: every statement names
-- the journal's schema. Workers refuse to start while one exists (sagacity.store.roles).
CREATE SCHEMA IF NOT EXISTS {role};
GRANT USAGE, CREATE ON SCHEMA {role} TO {role};

-- The schema Sagacity's tables are in ({schema}, where the owner migrated them): the role
-- reaches them there, and may create nothing in it (a table it made there under a name a later
-- migration creates would be its own, rewritable). Granted through PUBLIC, CREATE is not the
-- role's to lose: the workers' start-up check refuses it, and says to revoke it from PUBLIC.
GRANT USAGE ON SCHEMA {schema} TO {role};
REVOKE CREATE ON SCHEMA {schema} FROM {role};

-- Halts are the operators' (the owner's); workers only read them, and the gate every INTENT
-- is checked against (through sagacity_halted, which runs with the caller's rights).
REVOKE UPDATE, DELETE, TRUNCATE ON sagacity_halt, sagacity_halt_gate FROM {role};
REVOKE INSERT ON sagacity_halt, sagacity_halt_gate FROM {role};
GRANT SELECT ON sagacity_halt, sagacity_halt_gate TO {role};

-- Which migrations ran: a worker compares them with the ones it ships before it starts.
GRANT SELECT ON sagacity_schema_version TO {role};
