"""A conversation as the chat client sees it: alternating user/assistant messages.

Rendering (the same for every strategy, so they are compared on equal text):
- speaker_a's turns are user messages, speaker_b's assistant messages (a chain's turns carry
  their own role: bench/locomo/data.py `chain`); each turn is the line
  `<speaker>: <text>`, an image turn followed by ` [shares a photo: <caption>]`;
- consecutive turns of one speaker are merged into one message, newline-joined, so roles
  alternate — also across a session boundary: a session that opens with speaker_b (common in
  LoCoMo) continues the previous assistant message, so no synthetic user turn is invented and
  every dataset turn appears exactly once;
- each session's date appears once, as `[<date>] ` before the session's first line;
- a conversation that opens with speaker_b starts with an assistant message (sent with the
  first request); one that ends with speaker_a gets an empty scripted reply.

One request is made per user message; the assistant message after it is the scripted reply.
`session_scripts` renders each session on its own, by the same rules, as the client of the
`sessions` mode sends it (one conversation per session).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench.locomo.data import Conversation, speaker_role

Chat = list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class Script:
    messages: tuple[dict[str, str], ...]
    """The client's whole history once every request has been answered, oldest first."""
    requests: tuple[int, ...]
    """Index in `messages` of the user message each request sends, in order."""

    def reply(self, request: int) -> str:
        """The scripted assistant reply to the user message at index `request` ("" if the
        conversation ends with that user message)."""
        after = request + 1
        if after < len(self.messages) and self.messages[after]["role"] == "assistant":
            return self.messages[after]["content"]
        return ""


def build_script(conversation: Conversation) -> Script:
    """See the module docstring."""
    roles: list[str] = []
    lines: list[list[str]] = []
    for session in conversation.sessions:
        for k, turn in enumerate(session.turns):
            role = speaker_role(conversation, turn)
            line = turn.line if k or not session.date else f"[{session.date}] {turn.line}"
            if roles and roles[-1] == role:
                lines[-1].append(line)
            else:
                roles.append(role)
                lines.append([line])
    messages = [{"role": r, "content": "\n".join(ls)} for r, ls in zip(roles, lines)]
    if messages and messages[-1]["role"] == "user":
        messages.append({"role": "assistant", "content": ""})
    requests = tuple(i for i, m in enumerate(messages) if m["role"] == "user")
    return Script(messages=tuple(messages), requests=requests)


def session_scripts(conversation: Conversation) -> list[Script]:
    """One script per session that has turns, in session order."""
    return [build_script(replace(conversation, sessions=(session,)))
            for session in conversation.sessions if session.turns]
