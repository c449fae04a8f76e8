"""OpenAI `chat.completion.chunk`s, translated as they pass into the Responses API's stream.

The sequence a client gets: `response.created`, `response.in_progress`; per output item
`response.output_item.added`, then for a message `response.content_part.added`,
`response.output_text.delta`s, `response.output_text.done`, `response.content_part.done`, and
for a function call `response.function_call_arguments.delta`s and `...arguments.done`; then
`response.output_item.done`; finally `response.completed` (`response.incomplete` when the
output limit cut it) carrying the whole response with its usage. Every event has its
`sequence_number`. An upstream failure midway ends the stream with an `error` event.
"""

from __future__ import annotations

from typing import Any, Mapping

from gateway.core.dialects.events import ChunkTranslator, Event
from gateway.core.dialects.responses_answer import call_item, finished, message_item, text_part


class ResponsesStream(ChunkTranslator):
    """One stream's translation state: `start()`, `chunk()` per upstream chunk, then `end()`
    (after which `response` is the finished response) or `failure()`."""

    def __init__(self, shell: Mapping[str, Any]) -> None:
        self.response: dict[str, Any] = dict(shell)
        self._sequence = 0
        self._output: list[dict[str, Any]] = []
        self._open: Any = None
        """What is streaming: "text", a tool call's index, or None."""
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        """Tool call index → its item as far as it came (arguments growing)."""
        self._finish: Any = None
        self._usage: Any = None

    def start(self, first: Mapping[str, Any] | None) -> list[Event]:
        return [self._event("response.created", response=self.response),
                self._event("response.in_progress", response=self.response)]

    def _delta(self, delta: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        text = delta.get("content")
        if isinstance(text, str) and text:
            events += self._text_delta(text)
        for call in delta.get("tool_calls") or []:
            if isinstance(call, Mapping):
                events += self._call_delta(call)
        return events

    def end(self) -> list[Event]:
        events = self._close()
        self.response = finished(self.response, self._output, self._finish, self._usage)
        kind = "response.completed" if self.response["status"] == "completed" \
            else "response.incomplete"
        return events + [self._event(kind, response=self.response)]

    def failure(self, code: Any, message: str) -> list[Event]:
        return [self._event("error", code=code, message=message, param=None)]

    def _text_delta(self, text: str) -> list[Event]:
        events: list[Event] = []
        if self._open != "text":
            events += self._close()
            self._open, self._text = "text", []
            item = message_item(self.response["id"], [], status="in_progress")
            events.append(self._event("response.output_item.added",
                                      output_index=len(self._output), item=item))
            events.append(self._event("response.content_part.added", **self._at(item),
                                      content_index=0, part=text_part("")))
        self._text.append(text)
        return events + [self._event("response.output_text.delta", **self._at(self._item()),
                                     content_index=0, delta=text, logprobs=[])]

    def _call_delta(self, call: Mapping[str, Any]) -> list[Event]:
        events: list[Event] = []
        index = call.get("index", 0)
        function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
        if index not in self._calls:
            events += self._close()
            self._open = index
            self._calls[index] = call_item(call.get("id") or "", function.get("name") or "", "",
                                           status="in_progress")
            events.append(self._event("response.output_item.added",
                                      output_index=len(self._output),
                                      item=dict(self._calls[index])))  # a copy: it grows
        item = self._calls[index]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta",
                                      item_id=item["id"], output_index=len(self._output),
                                      delta=arguments))
        return events

    def _item(self) -> dict[str, Any]:
        return message_item(self.response["id"], [], status="in_progress")

    def _at(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": len(self._output)}

    def _close(self) -> list[Event]:
        """Events that finish the item streaming now (none if there is none)."""
        if self._open is None:
            return []
        index = len(self._output)
        if self._open == "text":
            text = "".join(self._text)
            item = message_item(self.response["id"], [text_part(text)])
            events = [self._event("response.output_text.done", **self._at(item),
                                  content_index=0, text=text, logprobs=[]),
                      self._event("response.content_part.done", **self._at(item),
                                  content_index=0, part=text_part(text))]
        else:
            call = self._calls[self._open]
            item = call_item(call["call_id"], call["name"], call["arguments"])
            events = [self._event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, name=item["name"],
                                  arguments=item["arguments"])]
        self._open = None
        self._output.append(item)
        return events + [self._event("response.output_item.done", output_index=index,
                                     item=item)]

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
