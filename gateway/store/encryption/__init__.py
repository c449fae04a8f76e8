"""Encryption at rest: texts sealed per tenant with AES-256-GCM (`crypto`), the tenants' keys
checked against the store at start-up (`keyring`), and key rotation (`rotation`). Part of the
store layer: imported by the store's adapters, memory records and the wiring."""
