"""Recall's decisions: recollections, fusing the dense and lexical rankings, and the learned
re-ranking with its weights. Pure; imports only `gateway.core`."""
