"""The cost benchmark (issue 23): `gateway bench cost`, bench/cost/cli.py."""
