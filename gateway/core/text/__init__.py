"""Rules about text: tokens (counting, lexical), dates, PII and national ids. Pure; imports only
`gateway.core`."""
