"""Fact extraction by an LLM through the upstream port, with the heuristic as the fallback.

`LlmFactExtractor.extract` asks the tenant's model for a JSON object
`{"facts": [{key, value, type, importance, confidence, source}]}` and returns None whenever the
answer cannot be trusted (upstream error, timeout, not JSON, not that shape): the caller then
uses the heuristic (`gateway.core.memory.extraction`), so no clear statement is lost to a bad
answer.
Items of a well-formed answer that are individually malformed are skipped and logged.

What the model sees is redacted; what it returns is redacted again and a value still holding a
placeholder is dropped (a model may echo an identifier it was never shown in full).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, Sequence

from gateway.core.memory import extraction
from gateway.core.memory.facts import FACT_TYPES, Fact, clean_value, normalize_key
from gateway.core.messages import StoredMessage
from gateway.core.text.pii import has_placeholder, redact
from gateway.ports import Upstream, UpstreamCall

log = logging.getLogger(__name__)

DEFAULT_PROMPT = f"""You extract long-term facts about the USER from a conversation excerpt.
Only use what the user states about themselves or their own situation (name, location, job,
age, dates, amounts of money, contract terms, deadlines, preferences about how to be answered).
Ignore questions, hypotheticals, and anything said only by the assistant.

Answer with one JSON object and nothing else:
{{"facts": [{{"key": "snake_case_key", "value": "...", "type": "fact" or "preference",
  "importance": 0.0-1.0, "confidence": 0.0-1.0, "source": message number}}]}}

Rules:
- Write each value in the user's own language, as short as possible (e.g. "北京", "30万元").
- Prefer these keys when they fit: {", ".join(sorted(extraction.VOCABULARY))}.
- Never include personal identifiers: no phone numbers, e-mail addresses, ID numbers, card
  numbers. Text shown as [PHONE], [EMAIL], [ID_NUMBER] or [BANK_CARD] is redacted: skip it.
- If there is nothing to extract, answer {{"facts": []}}."""

_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$")


class LlmFactExtractor:
    """ports.Upstream → facts. Stateless; one instance serves every request of a tenant."""

    def __init__(self, upstream: Upstream, model: str, api_base: str | None = None,
                 api_key: str | None = None, timeout: float = 10.0,
                 prompt: str | None = None) -> None:
        self.upstream = upstream
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.timeout = timeout
        self.prompt = prompt or DEFAULT_PROMPT

    async def extract(self, messages: Sequence[StoredMessage],
                      context: Sequence[StoredMessage] = ()) -> tuple[Fact, ...] | None:
        """Facts the model finds in the user messages of `messages` (with `context`, earlier
        messages shown for reference only), or None when its answer cannot be used."""
        numbered = [m for m in messages if m.message.role in ("user", "assistant")]
        user_ids = tuple(m.id for m in numbered if m.message.role == "user")
        if not user_ids:
            return ()
        call = UpstreamCall(model=self.model, body={
            "messages": [{"role": "system", "content": self.prompt},
                         {"role": "user", "content": _excerpt(context, numbered)}],
            "response_format": {"type": "json_object"}, "temperature": 0},
            api_base=self.api_base, api_key=self.api_key, timeout=self.timeout)
        try:
            response = await asyncio.wait_for(self.upstream.complete(call), self.timeout)
        except asyncio.TimeoutError:
            log.warning("fact extraction by %s timed out after %ss; using the heuristic",
                        self.model, self.timeout)
            return None
        except Exception as exc:  # the edge to a model: any failure means "use the fallback"
            log.warning("fact extraction by %s failed (%s: %s); using the heuristic",
                        self.model, type(exc).__name__, exc)
            return None
        stamp = max((m.created_at for m in numbered), default=0.0)
        return parse_facts(response, numbered, user_ids, stamp, self.model)


def _excerpt(context: Sequence[StoredMessage], numbered: Sequence[StoredMessage]) -> str:
    lines = []
    shown = [m for m in context if m.message.role in ("user", "assistant")]
    if shown:
        lines.append("Earlier messages, for reference only (extract nothing from them):")
        lines += [f"- {m.message.role}: {redact(m.message.text)}" for m in shown]
        lines.append("")
    lines.append("New messages (extract from the user's):")
    lines += [f"[{i}] {m.message.role}: {redact(m.message.text)}"
              for i, m in enumerate(numbered, start=1)]
    return "\n".join(lines)


def parse_facts(response: Any, numbered: Sequence[StoredMessage], user_ids: tuple[str, ...],
                stamp: float, model: str = "?") -> tuple[Fact, ...] | None:
    """The facts of a chat.completion answer, or None if it is not the expected JSON object."""
    try:
        content = response["choices"][0]["message"]["content"]
        data = json.loads(_FENCE.sub("", content))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        log.warning("fact extraction by %s: the answer is not JSON (%s); using the heuristic",
                    model, exc)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        log.warning("fact extraction by %s: no \"facts\" list in the answer; using the "
                    "heuristic", model)
        return None
    facts = []
    for item in data["facts"]:
        fact = _fact(item, numbered, user_ids, stamp)
        if fact is None:
            log.info("fact extraction by %s: skipped a malformed item %.200r", model, item)
        else:
            facts.append(fact)
    return tuple(facts)


def _fact(item: Any, numbered: Sequence[StoredMessage], user_ids: tuple[str, ...],
          stamp: float) -> Fact | None:
    if not isinstance(item, dict):
        return None
    key, value = item.get("key"), item.get("value")
    if not isinstance(key, str) or isinstance(value, (dict, list, bool)) or value is None:
        return None
    key, value = normalize_key(key), clean_value(redact(str(value)))
    if not key or not value or has_placeholder(value):
        return None
    kind = item.get("type") if item.get("type") in FACT_TYPES else "fact"
    source = item.get("source")
    sources = user_ids
    if isinstance(source, int) and not isinstance(source, bool) and 1 <= source <= len(numbered) \
            and numbered[source - 1].message.role == "user":
        sources = (numbered[source - 1].id,)
    return Fact(key=key, value=value, type=kind,
                importance=_unit(item.get("importance"), extraction.importance(key)),
                confidence=_unit(item.get("confidence"), 0.7), source_ids=sources,
                created_at=stamp, updated_at=stamp)


def _unit(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return default
    return min(1.0, max(0.0, float(value)))


async def extract_facts(messages: Sequence[StoredMessage], llm: LlmFactExtractor | None = None,
                        context: Sequence[StoredMessage] = ()) -> list[Fact]:
    """The facts of the user messages in `messages`: the LLM's when it answers usefully, plus
    every heuristic fact the LLM missed (its key and its value absent from the LLM's facts);
    the heuristic's alone without an LLM or when the LLM fails."""
    heuristic = list(extraction.extract_facts(messages))
    if llm is None:
        return heuristic
    found = await llm.extract(messages, context)
    if found is None:
        return heuristic
    keys = {f.key for f in found}
    values = [f.value.casefold() for f in found]
    missed = [f for f in heuristic
              if f.key not in keys and not any(f.value.casefold() in v for v in values)]
    return [*found, *missed]
