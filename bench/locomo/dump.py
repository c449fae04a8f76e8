"""`--dump-prompts`: every forwarded prompt of a run, one JSON line each, for `bench
locomo-rescore` to score again from scratch."""

from __future__ import annotations

import json
import threading
from typing import IO, Any

from bench.locomo.data import Question

Key = tuple[str, str | None, int | None]
"""(strategy, mode, budget)."""
Chat = list[dict[str, Any]]


class PromptDump:
    """`--dump-prompts`: one JSON line per probe (`qa`: its index), per null probe of the
    gateway (`qa` null, `null`: its index) and per replayed request of the gateway (`qa` null,
    `turn`: the request's place in its conversation), written from any thread; `bench
    locomo-rescore` scores the probes and re-computes the replay's prefix reuse from it."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        self._lock = threading.Lock()

    def write(self, sample_id: str, question: Question, key: Key, messages: Chat) -> None:
        strategy, mode, budget = key
        self._line({"conversation": sample_id, "qa": question.index, "strategy": strategy,
                    "mode": mode, "budget": budget, "messages": messages})

    def write_turn(self, sample_id: str, thread: str, turn: int, key: Key,
                   messages: Chat, stable: int | None = None) -> None:
        """`thread`: the gateway conversation the request went to (a session of its own in
        the `sessions` and `continued` modes); `stable`: its `x-gateway-stable-messages`
        (None: not sent)."""
        strategy, mode, budget = key
        self._line({"conversation": sample_id, "qa": None, "thread": thread, "turn": turn,
                    "strategy": strategy, "mode": mode, "budget": budget, "stable": stable,
                    "messages": messages})

    def write_null(self, sample_id: str, probe: int, key: Key, messages: Chat) -> None:
        """A null probe's forwarded prompt (`null`: its index in null_probes.py's list)."""
        strategy, mode, budget = key
        self._line({"conversation": sample_id, "qa": None, "null": probe, "strategy": strategy,
                    "mode": mode, "budget": budget, "messages": messages})

    def _line(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            self._file.write(line + "\n")
