"""The decisions: what the model sees. Pure functions over frozen values — no I/O, no clock,
no randomness. A test fails if anything here imports an I/O library."""
