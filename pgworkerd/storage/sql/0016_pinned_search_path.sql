-- 0016: the dependents' release (0010, 0011) runs with its own search_path. Runs with
-- search_path set to the pgworkerd schema, inside the migration transaction.
--
-- Why: a PL/pgSQL body is parsed when it runs, with the search_path of the session
-- that fires the trigger (the daemon's, a CLI's, an application's). Its tables are
-- qualified, but its calls are not: cardinality(bigint[]) and format(text, bigint)
-- each match the built-in only through a polymorphic or variadic argument, so a
-- function of the same name with those exact argument types, in any schema on that
-- search_path (public, where every role could create before PostgreSQL 15), would be
-- called instead, as the role completing the job (a review of round 21 ran someone's
-- code that way through hashtextextended, in queries.sql, since qualified). Pinned to
-- pg_catalog (pg_temp last: never searched for functions), the body can only call the
-- built-ins.
--
-- Cost: catalog changes only (ALTER FUNCTION takes no lock on jobs). A function with a
-- SET clause saves and restores the setting at each call: the trigger fires only for
-- a job that has dependents, as it becomes final.
DO $do$
BEGIN
EXECUTE format(
    'ALTER FUNCTION %I.release_dependents() SET search_path = pg_catalog, pg_temp',
    current_schema()
);
END
$do$;
