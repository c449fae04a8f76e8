"""`python -m bench agent`: stateless agent tool loops (Claude Code-like) through the gateway
to the strict fake upstream, measured step by step (issue 37)."""
