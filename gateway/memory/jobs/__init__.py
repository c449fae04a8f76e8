"""Memory off the request path: the memory worker and its jobs (index turns, mirror them to the
user's index, compact, summarise, extract facts and profile, pin, track topics) and re-indexing.
Runs in the worker process; imports records and search."""
