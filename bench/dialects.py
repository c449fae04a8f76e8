"""The same chat request in each of the gateway's wire forms (its three doors), for the
benchmarks that compare the doors on one conversation: `bench overhead` (rows per dialect) and
`bench locomo --dialect`."""

from __future__ import annotations

from typing import Any

DIALECTS = ("chat", "anthropic", "responses")
PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages",
         "responses": "/v1/responses"}


def in_dialect(body: dict[str, Any], dialect: str) -> dict[str, Any]:
    """A chat request (plain role/content messages) in another door's wire form, saying the
    same: Anthropic Messages (system prompts on top, `max_tokens` required) or Responses
    (`instructions`, `input` items)."""
    if dialect == "chat":
        return body
    system = [m["content"] for m in body["messages"] if m["role"] == "system"]
    turns = [m for m in body["messages"] if m["role"] != "system"]
    out: dict[str, Any] = {"model": body["model"]}
    if dialect == "anthropic":
        out.update(max_tokens=1024, messages=turns)
        if system:
            out["system"] = "\n\n".join(system)
    elif dialect == "responses":
        out["input"] = turns
        if system:
            out["instructions"] = "\n\n".join(system)
    else:
        raise ValueError(f"unknown dialect {dialect!r}")
    if body.get("stream"):
        out["stream"] = True
    # Extension fields cross every door (a benchmark's scripted reply).
    out.update({k: v for k, v in body.items() if k.startswith("x_")})
    return out
