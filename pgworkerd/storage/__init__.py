"""Every SQL statement and state transition, by role."""
