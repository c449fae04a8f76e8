"""The soak's clients: each one a user of one tenant talking through one door, stateless (the
whole history resent) or stateful (only the new message), its conversation growing turn by turn
until it starts a new one.

A client is a plain object that makes the next request body and reads the answer; the driver
(`bench.soak.drive`) sends them at a steady rate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bench.dialects import PATHS

DOORS = ("chat", "anthropic", "responses")
STREAM_ENDS = {"chat": b"data: [DONE]", "anthropic": b"message_stop",
               "responses": b"response.completed"}
"""What the last event of a complete stream holds, per door."""
TOPICS = ("my garden in Lisbon", "the trip to Kyoto", "learning the cello", "our tax forms",
          "the bicycle repair", "a birthday for Ana", "the kitchen remodel", "running a 10k")


@dataclass
class Client:
    """One user of one tenant on one door; `stateful` sends only the new message."""

    index: int
    tenant: str
    key: str
    user: str
    door: str
    stateful: bool
    turns: int
    stream_every: int
    conversation: int = 0
    turn: int = 0
    sent: int = 0
    history: list[dict[str, str]] = field(default_factory=list)
    previous_response: str | None = None

    @property
    def conversation_id(self) -> str:
        return f"soak-{self.index}-{self.conversation}"

    @property
    def path(self) -> str:
        return PATHS[self.door]

    def next_request(self) -> tuple[dict[str, Any], dict[str, str], bool]:
        """(body, headers, stream) of this client's next turn."""
        if self.turn >= self.turns:
            self.conversation, self.turn = self.conversation + 1, 0
            self.history, self.previous_response = [], None
        self.turn += 1
        self.sent += 1
        topic = TOPICS[(self.index + self.conversation) % len(TOPICS)]
        text = (f"Turn {self.turn} about {topic}: note that item {self.sent} of user "
                f"{self.user} costs {self.sent * 7 % 500} euros, and tell me what to do next.")
        message = {"role": "user", "content": text}
        # A stateful Responses chain is read back by the answer's id: those are not streamed.
        stream = (bool(self.stream_every) and self.sent % self.stream_every == 0
                  and not (self.door == "responses" and self.stateful))
        turns = [message] if self.stateful else [*self.history, message]
        body: dict[str, Any] = {"model": "echo", "stream": stream}
        headers = {"Authorization": f"Bearer {self.key}", "X-User-Id": self.user}
        if self.door == "chat":
            body["messages"] = [{"role": "system", "content": "You are a helpful assistant."},
                                *turns]
        elif self.door == "anthropic":
            body.update(max_tokens=256, system="You are a helpful assistant.", messages=turns)
        else:
            body.update(instructions="You are a helpful assistant.", input=turns)
            if self.stateful and self.previous_response:
                body["previous_response_id"] = self.previous_response
        if not (self.door == "responses" and self.stateful):
            headers["X-Conversation-Id"] = self.conversation_id
        self.history.append(message)
        return body, headers, stream

    def read_answer(self, payload: bytes, stream: bool) -> bool:
        """Keep what the answer says for the next turn; False if it is not a complete answer."""
        if stream:
            ok = STREAM_ENDS[self.door] in payload
            reply = "(streamed reply)"
        else:
            try:
                answer = json.loads(payload)
            except ValueError:
                return False
            reply = reply_text(self.door, answer)
            ok = reply is not None
            if self.door == "responses":
                self.previous_response = answer.get("id")
        if ok:
            self.history.append({"role": "assistant", "content": reply or ""})
        else:
            self.history.pop()
        return ok


def reply_text(door: str, answer: dict[str, Any]) -> str | None:
    """The assistant's text in a non-streamed answer of `door`, None if it has none."""
    try:
        if door == "chat":
            return str(answer["choices"][0]["message"]["content"])
        if door == "anthropic":
            return "".join(b.get("text", "") for b in answer["content"])
        return "".join(part.get("text", "") for item in answer["output"]
                       if item.get("type") == "message" for part in item["content"])
    except (KeyError, IndexError, TypeError):
        return None


def clients(tenants: dict[str, str], users_per_tenant: int, turns: int,
            stream_every: int) -> list[Client]:
    """Every tenant × user × door × (stateless, stateful): one client each."""
    out = []
    for tenant, key in tenants.items():
        for u in range(users_per_tenant):
            for door in DOORS:
                for stateful in (False, True):
                    out.append(Client(len(out), tenant, key, f"{tenant}-user-{u}", door,
                                      stateful, turns, stream_every))
    return out
