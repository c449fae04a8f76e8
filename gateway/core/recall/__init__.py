"""Recall's decisions: recollections, fusing the dense and lexical rankings, and the learned
re-ranking with its weights, and their assembly from hits to recollections (`assembly`, what
the recaller and the offline simulation both run). Pure; imports only `gateway.core`."""
