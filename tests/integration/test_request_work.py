"""What one request costs does not grow with the conversation's history (issue 36), counted,
not timed: the expensive calls a warm request makes — date parsing, tokenisation, embedding,
store round trips — through the real gateway over HTTP, a real store, inline recording (so a
conversation's turns are applied and indexed before its seeding request returns), for a 50-
and a 300-turn conversation a stateless client resends whole, through each door.

What is derived from a stored turn once (its day, its token count, its vector, its lexical
terms) is kept by the turn's id; a request reads the history in its body, parses and hashes it
— linear, and no more — but never again derives what it already knows of a stored turn. Each
count has a stated ceiling, and the 300-turn count may not exceed the 50-turn one.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import httpx
import pytest
import redis.asyncio.client
import tiktoken

from bench.dialects import in_dialect
from gateway.core.recall import ranking, recollection
from gateway.core.text import days
from gateway.memory.search.embedding import EmbeddingService
from tests.support.gateway import KEYS, gateway_config, running_gateway

USER = ("Turn {i}: notes on the quarterly plan — budgets, hiring, the migration of the billing "
        "service and the load tests of the storage layer, reviewed on 2023-05-{day:02d}.")
REPLY = ("Noted for turn {i}: the billing migration stays on track, the owners of the security "
         "review are confirmed and I will track the load tests before the release window.")
QUESTION = "What did we decide on May 2nd about the billing migration? (question {k})"
# A 50-turn history (~4,000 tokens) does not fit: every request drops old turns and recalls.
CONTEXT = {"max_context_tokens": 3000, "reserve_completion_tokens": 500}
DOORS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages",
         "responses": "/v1/responses"}
VARIANTS = 3
"""Questions asked, each twice to warm up (the first request of a conversation builds its
indexes; each stored turn a question finds is read and decoded once), then each counted."""

CEILING = {
    "find_dates": 3,  # the question's named days: its need, its lexical query, its ranking
    "embedded_texts": 1,  # the question, once
    "store_round_trips": 6,
    "tokenised_chars": 2_000,  # the question and the reply; never a stored turn (~250 each)
    "speaker_scans": 0,  # a stored turn's speaker labels are read when its item is decoded
}
"""Per warm request, whatever the history's length."""


def history(turns: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for i in range(1, turns + 1):
        out += [{"role": "user", "content": USER.format(i=i, day=1 + i % 28)},
                {"role": "assistant", "content": REPLY.format(i=i)}]
    return out


class Counts:
    """Calls of the expensive functions, counted by wrapping them (each calls through)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.seen: Counter[str] = Counter()
        self._wrap(monkeypatch, days, "find_dates", "find_dates")
        for module in (recollection, ranking):  # each holds the function by name
            self._wrap(monkeypatch, module, "speaker_labels", "speaker_scans")
        self._wrap(monkeypatch, EmbeddingService, "_embed", "embedded_texts",
                   lambda texts, **_: len(texts))
        self._wrap(monkeypatch, tiktoken.Encoding, "encode_ordinary", "tokenised_chars",
                   lambda text: len(text))
        # A pipeline is one round trip; a command outside one (Pipeline overrides it) too.
        self._wrap(monkeypatch, redis.asyncio.client.Pipeline, "execute", "store_round_trips")
        self._wrap(monkeypatch, redis.asyncio.client.Redis, "execute_command",
                   "store_round_trips")

    def _wrap(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, counter: str,
              weight: Callable[..., int] | None = None) -> None:
        original = getattr(owner, name)
        seen = self.seen
        bound = isinstance(owner, type)

        def counting(*args: Any, **kwargs: Any) -> Any:
            seen[counter] += weight(*args[bound:], **kwargs) if weight else 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    @contextmanager
    def per_request(self, requests: int) -> Iterator[Counter[str]]:
        """The counts of the block, divided by its requests (rounded up)."""
        before = Counter(self.seen)
        out: Counter[str] = Counter()
        yield out
        for name in CEILING:
            out[name] = -(-(self.seen[name] - before[name]) // requests)


@pytest.fixture
def gateway_url(redis_url: str) -> Iterator[str]:
    # No relevance floor or gate: the test embedder's similarities are on no model's scale.
    memory = {"memory": {"recall_relevance_floor": -1, "recall_relevance_gate": -1}}
    with running_gateway(gateway_config(redis_url, context=CONTEXT, tenant=memory)) as url:
        yield url


def post(url: str, door: str, messages: list[dict[str, str]], conversation: str, *,
         persist: bool, tenant: str = "acme") -> dict[str, Any]:
    body = in_dialect({"model": "echo", "messages": messages}, door)
    response = httpx.post(url + DOORS[door], json=body, timeout=120, headers={
        "Authorization": f"Bearer {KEYS[tenant]}", "x-api-key": KEYS[tenant],
        "anthropic-version": "2023-06-01", "X-Conversation-Id": conversation,
        "X-User-Id": conversation, "X-Gateway-Persist": "true" if persist else "false"})
    assert response.status_code == 200, response.text
    return dict(response.headers)


def work(url: str, counts: Counts, turns: int, door: str = "chat") -> Counter[str]:
    """Per-request counts of warm requests of a stateless client resending `turns` turns."""
    conversation = f"work-{door}-{turns}"
    stored = history(turns)
    post(url, "chat", stored[:-1], conversation, persist=True)  # recorded and indexed inline
    for k in [*range(VARIANTS)] * 2:  # warm: each stored turn a question finds is read once
        post(url, door, stored + [{"role": "user", "content": QUESTION.format(k=k)}],
             conversation, persist=False)
    with counts.per_request(VARIANTS) as counted:
        for k in range(VARIANTS):
            headers = post(url, door, stored + [{"role": "user", "content": QUESTION.format(k=k)}],
                           conversation, persist=False)
    shown = {k: v for k, v in headers.items() if k.startswith("x-gateway")}
    assert int(headers["x-gateway-memory-recalled"]) > 0, shown  # recall ran, found turns
    return counted


def test_a_turn_waiting_to_be_applied_is_decoded_once_not_by_every_request(redis_url,
                                                                          monkeypatch):
    # Nobody applies the turns here (`external`: the recorder runs elsewhere, and lags): a
    # continuing conversation's turns all stay pending, and each request's load shows them.
    # Each is decoded (and applied) by the first load that finds it; the loads after it
    # start from there (gateway/store/pending_cache.py), however long the backlog.
    from gateway.store import redis_store
    decoded = Counter()
    original = redis_store.decode_record

    def counting(text: Any) -> Any:
        decoded["pending_turns"] += 1
        return original(text)

    monkeypatch.setattr(redis_store, "decode_record", counting)
    config = gateway_config(redis_url, context=CONTEXT, recorder={"mode": "external"})
    with running_gateway(config) as url:
        messages = history(50)[:-1]
        post(url, "chat", messages, "backlog", persist=True)  # one pending turn, 99 messages
        for k in range(8):
            # The echo model's reply: the user's message, resent as the client received it.
            messages = messages + [{"role": "assistant", "content": messages[-1]["content"]},
                                   {"role": "user", "content": QUESTION.format(k=k)}]
            before = decoded["pending_turns"]
            post(url, "chat", messages, "backlog", persist=True)
            # The turn the request before recorded (1 + k pending turns in all).
            assert decoded["pending_turns"] - before == 1, (k, dict(decoded))


def test_a_warm_request_does_the_same_work_at_50_and_300_turns(gateway_url, monkeypatch):
    counts = Counts(monkeypatch)
    short = work(gateway_url, counts, 50)
    long = work(gateway_url, counts, 300)
    for name, ceiling in CEILING.items():
        assert long[name] <= ceiling, (name, dict(long))
        assert long[name] <= short[name] or name == "tokenised_chars", (name, short, long)
    # The question's tokens are counted once per request; no stored turn is ever recounted.
    assert long["tokenised_chars"] <= short["tokenised_chars"] + 200


@pytest.mark.parametrize("door", ["anthropic", "responses"])
def test_the_anthropic_and_responses_doors_do_no_more_work_than_the_chat_door(gateway_url,
                                                                            monkeypatch, door):
    counts = Counts(monkeypatch)
    chat = work(gateway_url, counts, 300)
    other = work(gateway_url, counts, 300, door)
    for name in CEILING:
        assert other[name] <= chat[name], (name, door, dict(chat), dict(other))


def test_the_date_a_question_opens_with_is_not_what_recall_searches(gateway_url, monkeypatch):
    # A client that dates its messages ("[2023/05/30 (Tue) 19:58] …", LongMemEval's) marks
    # when it asks, not what: the question is searched and ranked without the marker.
    searched: list[str] = []
    original = EmbeddingService.embed_query_one

    async def recording(self: EmbeddingService, text: str) -> Any:
        searched.append(text)
        return await original(self, text)

    monkeypatch.setattr(EmbeddingService, "embed_query_one", recording)
    stored = history(50)
    post(gateway_url, "chat", stored[:-1], "work-dated", persist=True)
    dated = {"role": "user", "content": "[2023/05/30 (Tue) 19:58] " + QUESTION.format(k=0)}
    counted, recalled = asked(gateway_url, stored + [dated], "work-dated", "work-dated",
                              Counts(monkeypatch))
    assert searched == [QUESTION.format(k=0)] and recalled > 0, dict(counted)


def test_a_question_with_nothing_to_search_is_never_embedded(gateway_url, monkeypatch):
    # An anonymous client's new conversation: no index of its own yet, no user memory.
    counts = Counts(monkeypatch)
    with counts.per_request(1) as counted:
        response = httpx.post(gateway_url + DOORS["chat"], timeout=120, json={
            "model": "echo", "messages": [{"role": "user", "content": QUESTION.format(k=0)}]},
            headers={"Authorization": f"Bearer {KEYS['acme']}",
                     "X-Conversation-Id": "work-nothing-yet", "X-Gateway-Persist": "false"})
        assert response.status_code == 200, response.text
    assert counted["embedded_texts"] == 0, dict(counted)
    assert counted["store_round_trips"] > 0  # the request did read its conversation


WHOLE = {"max_context_tokens": 100_000, "reserve_completion_tokens": 500}
"""A window the 50-turn history (~4,000 tokens) fits: it goes upstream whole."""


def asked(url: str, messages: list[dict[str, str]], conversation: str, user: str,
          counts: Counts, tenant: str = "acme") -> tuple[Counter[str], int]:
    """(per-request counts, items recalled) of one request not stored."""
    with counts.per_request(1) as counted:
        response = httpx.post(url + DOORS["chat"], timeout=120, json={
            "model": "echo", "messages": messages}, headers={
            "Authorization": f"Bearer {KEYS[tenant]}", "X-Conversation-Id": conversation,
            "X-User-Id": user, "X-Gateway-Persist": "false"})
        assert response.status_code == 200, response.text
    return counted, int(response.headers["x-gateway-memory-recalled"])


def test_a_history_that_goes_whole_is_searched_only_outside_the_conversation(redis_url,
                                                                           monkeypatch):
    memory = {"memory": {"recall_relevance_floor": -1, "recall_relevance_gate": -1}}
    config = gateway_config(redis_url, context=WHOLE, tenant=memory, per_tenant={
        "globex": {"request_limits": {"max_stored_messages": 60}}})
    counts = Counts(monkeypatch)
    with running_gateway(config) as url:
        stored = history(50)
        question = {"role": "user", "content": QUESTION.format(k=0)}
        post(url, "chat", stored[:-1], "whole-first", persist=True)
        # Only this conversation of its user: the whole history shows every turn recall could
        # find, so nothing is searched — not even the question embedded.
        counted, recalled = asked(url, stored + [question], "whole-first", "whole-first",
                                  counts)
        assert (counted["embedded_texts"], recalled) == (0, 0), dict(counted)
        # The same user's other conversation is searched (the question is embedded once) and
        # recalled from; its own history goes whole beside it.
        other = [{"role": "user", "content": "Let us plan the offsite."},
                 {"role": "assistant", "content": "Sure: where and when?"}]
        post(url, "chat", other + [{"role": "user", "content": "In June."}], "whole-other",
             persist=True)
        counted, recalled = asked(url, other + [question], "whole-other", "whole-first", counts)
        assert counted["embedded_texts"] == 1 and recalled > 0, dict(counted)
        # A conversation past its tenant's stored cap (60 messages): its oldest turns are
        # archived, so a stateful client's history, the stored ones, does not hold them:
        # recall searches the conversation's own turns too.
        for end in (49, 99):  # at most 60 new messages a request
            post(url, "chat", stored[:end], "whole-archived", persist=True, tenant="globex")
        counted, recalled = asked(url, [question], "whole-archived", "whole-archived", counts,
                                  tenant="globex")
        assert counted["embedded_texts"] == 1 and recalled > 0, dict(counted)
