"""Sustained load on 1..N gateway replicas sharing one redis-server (`python -m bench load`)."""
