"""Benchmarks of the Context Gateway (`python -m bench <name>`); results live in bench/results/."""
