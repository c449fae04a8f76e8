"""Searching a namespace: the embedding service, dense (FAISS) and lexical (BM25) indexes and
their in-process caches. Used by recall on the request path and by the jobs; imports records."""
