"""Django's tier: the real framework (Python >= 3.12, in .venv-django) against the real
server and `pgworkerd run`. `make test` runs it after the other tiers."""
