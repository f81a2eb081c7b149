-- The retention role: reads and deletes journal rows (never inserts or updates them), so that
-- sagas past the retention period can be purged once exported. NOLOGIN: grant membership to the
-- login that runs retention (`GRANT sagacity_retention TO ops_bot`). The application role
-- keeps no DELETE.
--
-- Roles belong to the whole cluster: creating one needs CREATEROLE. A migrator without it
-- skips the role with a notice; create it and grant it the table privileges yourself.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sagacity_retention') THEN
        BEGIN
            CREATE ROLE sagacity_retention NOLOGIN;
        EXCEPTION
            -- another database's migrator created it at the same moment
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'sagacity_retention not created: this role lacks CREATEROLE';
        END;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'sagacity_retention') THEN
        GRANT SELECT, DELETE ON side_effect_journal TO sagacity_retention;
    END IF;
END
$$;
