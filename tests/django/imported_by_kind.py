"""A module no code of the tests imports: a job whose kind names it must not get it
imported by reading its result (tests/django/test_faults.py)."""
