-- 0009: the dashboard's dead count (issue 21).
-- Runs with search_path set to the pgworkerd schema, inside the migration transaction.
-- (0009: 0007 and 0008 come from other branches; migrate applies every missing version.)

-- The overview counts dead jobs per queue (dashboard_dead_by_queue) every few seconds
-- while a browser is open. Through jobs_finished_idx (state, finished_at) that is one
-- heap visit per dead job, scattered over the table (20,000 dead among a million
-- finished: 60 to 175 ms); this index answers it from itself, an index-only scan of a
-- few pages (5 ms: bench/web_overview_abab.py).
-- Its cost on the job path: an entry written when a job becomes dead and removed by
-- vacuum once the row is retried or pruned. No other transition writes to it, and it
-- takes no update off the HOT path (`queue` and `state` are indexed already).
-- The build reads the whole table under a SHARE lock (no CONCURRENTLY inside the
-- migration's transaction): writes to `jobs` wait for it, about a second a million rows.
CREATE INDEX jobs_dead_queue_idx ON jobs (queue) WHERE state = 'dead';
