"""The decisions: what the model sees. Pure functions over frozen values — no I/O, no clock,
no randomness; tests fail if anything here imports an I/O library or a higher layer.

Here: ids, messages, transcripts (reconciling what a client sends), replies, the context
policy and one-shot context. `text/`: rules about text (tokens, dates, PII); `recall/`:
recollections, fusion and the learned ranking; `memory/`: what the memory worker decides
(compaction, facts, profile, topics); `context/`: the rewrite under the budget. Anything in
the package may import core; core imports only itself."""
