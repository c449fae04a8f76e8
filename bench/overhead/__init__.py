"""`python -m bench overhead`: the latency the gateway adds over calling the upstream directly,
measured side by side with LiteLLM's proxy, interleaved in one run on one machine."""
