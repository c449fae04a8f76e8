"""Tests of whole processes: `gateway serve` and `gateway worker` started, signalled and killed;
crash recovery, replicas, store outages, the deploy image, and the console in a real browser."""
