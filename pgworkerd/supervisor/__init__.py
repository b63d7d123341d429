"""The supervisor: one process per host that forks the worker children and owns their
signals, runtime limits, leases and housekeeping. See core.py for the loop."""
