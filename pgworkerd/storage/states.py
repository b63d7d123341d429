"""Every state of a job, in the order tables show them; the last three are final.
`waiting`: for the jobs it was enqueued after (workflows). A module of its own, without
psycopg: the CLI's parser offers them as choices before it knows it needs a database."""

STATES = ("waiting", "queued", "running", "succeeded", "dead", "cancelled")
FINAL_STATES = STATES[3:]
