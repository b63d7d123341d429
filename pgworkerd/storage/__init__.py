"""Every SQL statement and state transition of a job (`store`, `sql/`), the schema and
its migrations, connections, the notification channels and the embedded cluster."""
