"""Driving one agent session through a gateway with the real `anthropic` / `openai` SDKs, and
measuring every step from what the strict fake upstream received (`GET /fake/received`).

A step is one client request. Its record says what the client got (status; rejected = any
4xx/5xx), what was forwarded (the fake's log: the last request it received for the step) and
the measures of measure.py and cost.py. When the gateway answers an error, the session goes on
as a client that retries elsewhere would: the reply is asked of the fake directly, with the
system prompt, the task and the newest exchange only, so the next step has a real reply
(thinking signature included); that call is not measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import anthropic
import httpx
import openai

from bench.agent import measure
from bench.agent.cost import Priced, priced, step_cost
from bench.agent.sessions import INSTRUCTION, TASK, AgentSession
from bench.locomo.meter import PromptMeter

FORWARD_PATHS = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions"}
TIMEOUT = 300.0


@dataclass
class Step:
    step: int
    status: int | None
    """What the client got: 200, the error's HTTP status, or None (no HTTP answer)."""
    error: str = ""
    forwarded_count: int = 0
    """Requests the fake received for this step (0: the gateway sent nothing)."""
    upstream_status: int | None = None
    original_tokens: int = 0
    forwarded_tokens: int | None = None
    essential_tokens: int = 0
    budget: int = 0
    task_kept: bool | None = None
    instruction_kept: bool | None = None
    """None before the instruction was given (or nothing forwarded)."""
    results_whole: bool | None = None
    """None at the first step (no tool result yet) or nothing forwarded."""
    breakpoints: int = 0
    breakpoints_in_messages: int = 0
    reuse: float | None = None
    """Shared leading tokens with the previous forwarded request / this request's tokens."""
    cost: dict[str, float] = field(default_factory=dict)
    whole_cost: dict[str, float] = field(default_factory=dict)

    @property
    def rejected(self) -> bool:
        return self.status != 200

    @property
    def over_budget(self) -> bool:
        return self.forwarded_tokens is not None and self.forwarded_tokens > self.budget

    @property
    def compacted(self) -> bool:
        return self.forwarded_tokens is not None and self.forwarded_tokens < self.original_tokens

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rejected": self.rejected, "over_budget": self.over_budget,
                "compacted": self.compacted}

    def row(self) -> list[Any]:
        """The values of ROW_FIELDS (costs rounded to 0.1 token, reuse to 0.001)."""
        values = {**self.as_dict(), "reuse": None if self.reuse is None else round(self.reuse, 3),
                  "cost": {k: round(v, 1) for k, v in self.cost.items()},
                  "whole_cost": {k: round(v, 1) for k, v in self.whole_cost.items()}}
        return [values[name] for name in ROW_FIELDS]


ROW_FIELDS = ("step", "status", "upstream_status", "forwarded_count", "original_tokens",
              "forwarded_tokens", "essential_tokens", "task_kept", "instruction_kept",
              "results_whole", "breakpoints", "breakpoints_in_messages", "reuse", "compacted",
              "over_budget", "cost", "whole_cost")
"""A step's fields in the JSON dump, one list per step (its error text goes to `errors`)."""


@dataclass
class Endpoints:
    gateway_url: str
    fake_url: str
    api_key: str
    model: str
    """The gateway's alias for the fake's `agent` in this dialect."""


class Driver:
    """Runs sessions in one dialect against one gateway; `budget`: the forwarded prompt's
    ceiling measured against (the window less the completion's reserve)."""

    def __init__(self, dialect: str, endpoints: Endpoints, budget: int, *, stream: bool,
                 meter: PromptMeter | None = None) -> None:
        self.dialect, self.endpoints, self.budget, self.stream = dialect, endpoints, budget, stream
        self.meter = meter or PromptMeter()
        self.http = httpx.Client(timeout=TIMEOUT)
        if dialect == "anthropic":
            self._anthropic = anthropic.Anthropic(base_url=endpoints.gateway_url,
                                                  api_key=endpoints.api_key, max_retries=0,
                                                  timeout=TIMEOUT)
            self._direct_anthropic = anthropic.Anthropic(base_url=endpoints.fake_url,
                                                         api_key="fake", max_retries=0,
                                                         timeout=TIMEOUT)
        else:
            self._openai = openai.OpenAI(base_url=endpoints.gateway_url + "/v1",
                                         api_key=endpoints.api_key, max_retries=0,
                                         timeout=TIMEOUT)
            self._direct_openai = openai.OpenAI(base_url=endpoints.fake_url + "/v1",
                                                api_key="fake", max_retries=0, timeout=TIMEOUT)

    def close(self) -> None:
        self.http.close()

    def run(self, conversation: str, steps: int,
            progress: Callable[[Step], None] | None = None) -> list[Step]:
        session = AgentSession(self.dialect)
        records: list[Step] = []
        previous: Priced | None = None
        previous_whole: Priced | None = None
        self.clear()
        for k in range(steps):
            body = session.request()
            body["model"] = self.endpoints.model
            reply, status, error = self._call(self._send, body, conversation)
            received = self.received()
            record = Step(k, status, error, len(received), budget=self.budget)
            record.original_tokens = measure.gateway_tokens(self.dialect, body, self.meter)
            instructions = [INSTRUCTION] if session.instructed else []
            record.essential_tokens = measure.essential_tokens(
                self.dialect, body, TASK, instructions, self.meter)
            whole = priced(self.meter, measure.units(self.dialect, body), None)
            record.whole_cost = step_cost(self.meter, previous_whole, whole)
            previous_whole = whole
            if received:
                sent = received[-1]
                previous = self._measure(record, sent, session, previous)
            if reply is None:
                reply = self._direct_reply(body)
            self.clear()
            if progress is not None:
                progress(record)
            records.append(record)
            if k + 1 < steps:
                session.answer(reply)
        return records

    def _measure(self, record: Step, sent: dict[str, Any], session: AgentSession,
                 previous: Priced | None) -> Priced:
        forwarded = sent["body"]
        record.upstream_status = sent.get("status", 200)
        record.forwarded_tokens = measure.gateway_tokens(self.dialect, forwarded, self.meter)
        record.task_kept = measure.text_kept(forwarded, TASK)
        if session.instructed:
            record.instruction_kept = measure.text_kept(forwarded, INSTRUCTION)
        if session.results:
            record.results_whole = measure.results_whole(self.dialect, forwarded,
                                                         session.results)
        total, inside, marked = measure.breakpoints(self.dialect, forwarded)
        record.breakpoints, record.breakpoints_in_messages = total, inside
        units = measure.units(self.dialect, forwarded)
        current = priced(self.meter, units, marked if self.dialect == "anthropic" else None)
        if previous is not None:
            shared, _, tokens = self.meter.shared_prefix(previous.units, units)
            record.reuse = shared / tokens if tokens else 0.0
        record.cost = step_cost(self.meter, previous, current)
        return current

    # -- the fake's log ----------------------------------------------------------------------

    def received(self) -> list[dict[str, Any]]:
        """This dialect's requests the fake received since the last `clear`, oldest first."""
        answer = self.http.get(self.endpoints.fake_url + "/fake/received")
        answer.raise_for_status()
        path = FORWARD_PATHS[self.dialect]
        return [r for r in answer.json()["requests"] if r.get("path", "").endswith(path)]

    def clear(self) -> None:
        self.http.delete(self.endpoints.fake_url + "/fake/received").raise_for_status()

    # -- the clients ---------------------------------------------------------------------------

    def _call(self, send: Callable[..., dict[str, Any]], body: dict[str, Any],
              conversation: str | None) -> tuple[dict[str, Any] | None, int | None, str]:
        """(reply, status, error) of one SDK call; any error is caught and described."""
        try:
            return send(body, conversation), 200, ""
        except (anthropic.APIStatusError, openai.APIStatusError) as exc:
            return None, exc.status_code, f"{exc.status_code}: {str(exc)[:300]}"
        except (anthropic.APIError, openai.APIError) as exc:
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise exc.__context__  # the SDKs wrap a Ctrl-C during a request
            return None, None, f"{type(exc).__name__}: {str(exc)[:300]}"

    def _send(self, body: dict[str, Any], conversation: str | None,
              direct: bool = False) -> dict[str, Any]:
        headers = {"X-Conversation-Id": conversation} if conversation else {}
        if self.dialect == "anthropic":
            client = self._direct_anthropic if direct else self._anthropic
            if self.stream:
                with client.messages.stream(**body, extra_headers=headers) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(**body, extra_headers=headers)
            return {"content": [b.model_dump(mode="json", exclude_none=True)
                                for b in message.content]}
        client = self._direct_openai if direct else self._openai
        if self.stream:
            return _assembled(client.chat.completions.create(**body, stream=True,
                                                             extra_headers=headers))
        choice = client.chat.completions.create(**body, extra_headers=headers).choices[0]
        calls = [{"id": c.id, "type": "function",
                  "function": {"name": c.function.name, "arguments": c.function.arguments}}
                 for c in choice.message.tool_calls or []]
        return {"role": "assistant", "content": choice.message.content,
                **({"tool_calls": calls} if calls else {})}

    def _direct_reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The fake's own reply to the opening of `body` (system prompt, task) and its newest
        exchange: what a client gets when it asks again elsewhere after a rejected step."""
        messages = body["messages"]
        head = 2 if self.dialect == "chat" else 1
        last_reply = max((i for i, m in enumerate(messages) if m["role"] == "assistant"),
                         default=len(messages))
        small = {**body, "model": "agent",
                 "messages": messages[:head] + messages[max(head, last_reply):]}
        reply, _, error = self._call(lambda b, c: self._send(b, c, direct=True), small, None)
        if reply is None:
            raise RuntimeError(f"the fake refused the session's newest exchange too: {error}")
        return reply


def _assembled(chunks: Any) -> dict[str, Any]:
    """The assistant message of a streamed chat completion."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for call in delta.tool_calls or []:
                into = calls.setdefault(call.index, {"id": "", "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                if call.id:
                    into["id"] = call.id
                if call.function and call.function.name:
                    into["function"]["name"] += call.function.name
                if call.function and call.function.arguments:
                    into["function"]["arguments"] += call.function.arguments
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message
