-- 0005: the trace context a job was enqueued under (OpenTelemetry, extra `otel`).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
-- A nullable column with no default: a change of the catalog only, no table rewrite and
-- no scan; the ACCESS EXCLUSIVE lock it takes is held for that instant (docs/deploy.md).

-- The W3C propagation fields (`traceparent`, `tracestate`) of the enqueuing code's span,
-- as a JSON object: kept beside the payload, never in it (the payload stays the user's).
-- NULL when the producer had no trace context to record.
ALTER TABLE jobs ADD COLUMN trace_context jsonb;
ALTER TABLE jobs_archive ADD COLUMN trace_context jsonb;
