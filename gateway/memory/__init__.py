"""Long-lived memory: what the gateway derives from transcripts, off the request path.

Layers (DESIGN.md, "Memory layers"): older turns indexed for recall, rolling summary chunks,
long-term facts and a profile per user. Everything here is written by the memory worker after
the recorder applied a turn; the request path only embeds the query and searches.
"""
