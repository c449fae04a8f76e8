"""Memory on the request path: the recaller, its stored entries and their cache, and the
service the pipeline calls. Imports records and search; never the jobs."""
