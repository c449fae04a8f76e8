"""Pure tests: no servers, no processes, no network — the fast loop (`./scripts/test --fast`)."""
