DROP INDEX pgworkerd.jobs_finished_idx;
