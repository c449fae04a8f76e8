"""Rules about text: tokens (counting, lexical), dates and the days a question names, PII and
national ids. Pure; imports only `gateway.core`."""
