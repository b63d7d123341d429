\timing on
TRUNCATE pgworkerd.jobs;
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, max_attempts, run_at, lease_token,
    worker, created_at, started_at, finished_at, result)
SELECT 'q' || (i % 4), 'noop', jsonb_build_object('i', i), 'succeeded', 1, 5,
       now() - interval '1 day' + i * interval '50 ms', gen_random_uuid(),
       'host-1:12345/default#0', now() - interval '1 day' + i * interval '50 ms',
       now() - interval '1 day' + i * interval '50 ms', now() - interval '1 day' + i * interval '51 ms', NULL
FROM generate_series(1, 930000) AS i;
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, max_attempts, run_at, lease_token,
    worker, last_error, errors, created_at, started_at, finished_at)
SELECT 'q' || (i % 4), 'noop', jsonb_build_object('i', i), 'dead', 5, 5, now() - interval '1 hour',
       gen_random_uuid(), 'host-1:12345/default#0', 'boom', '[{"attempt": 5, "error": "boom"}]',
       now() - interval '2 hour', now() - interval '1 hour', now() - interval '1 hour'
FROM generate_series(1, 20000) AS i;
INSERT INTO pgworkerd.jobs (queue, kind, payload, run_at)
SELECT 'q' || (i % 4), 'noop', jsonb_build_object('i', i), now() + interval '1 day'
FROM generate_series(1, 50000) AS i;
VACUUM ANALYZE pgworkerd.jobs;
SELECT pg_size_pretty(pg_total_relation_size('pgworkerd.jobs')) AS total, pg_size_pretty(pg_relation_size('pgworkerd.jobs')) AS heap;
