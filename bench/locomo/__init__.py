"""The LoCoMo memory-quality benchmark: replay conversations through the gateway, probe each
question, and score what would reach the model (evidence recall, answer containment, session
date recall, forwarded tokens, prompt-prefix reuse) against plain baselines."""
