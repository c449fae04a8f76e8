"""`python -m bench overhead`: the latency the gateway adds over calling the upstream directly,
measured like for like with LiteLLM's proxy (the same body for every target, 50 and 300 stored
turns), interleaved in one run on one machine."""
