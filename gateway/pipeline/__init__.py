"""One request on the request path: parse → load → recall → rewrite → upstream → record, and
what it needs on the way (history costs, rate limits, the record buffer and its journal, the
request history, tracked tasks). Imported by `gateway.http` and `gateway.wiring`; imports no HTTP
framework."""
