"""Long-lived memory: what the gateway derives from transcripts, and recalls for a request.

Layers: older turns indexed for recall, rolling summary chunks, long-term facts and a profile
per user. The rooms, lowest first (tests/unit/test_layers.py holds the order):
- `ports.py`: the interfaces (embedder, indexes); `embedders/`: the models behind them;
- `records/`: what memory keeps in the store, one store per kind;
- `search/`: embedding and the dense and lexical indexes per namespace;
- `recall/` (request path: the pipeline calls `recall.service`) and `jobs/` (the memory
  worker's processors, in the worker process) — peers that never import each other;
- `control.py` (the user-control API's logic) and `runtime.py` (builds it all from config).
Imported by the pipeline, the wiring, the HTTP handlers and the worker; it imports no HTTP
code and nothing of the pipeline."""
