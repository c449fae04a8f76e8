"""Turns the record buffer could not hand to the store by shutdown, kept on local disk until
the next start replays them — never dropped.

At shutdown the app drains the record buffer (`RecordBuffer.drain`); what the store did not
take by then (it is down) is `spill`ed here: one JSON line per turn, appended to
`<data_dir>/record-journal-<pid>-<start>.jsonl` (mode 0600: it holds conversation text, like the
store's own AOF), the file and its directory fsync'd before the process goes on. One file per
serving process, so several uvicorn workers never interleave their writes. A process is named
by its pid and its start time (`<pid>-<start>`): a pid alone is reused, and in a container
every start has the same one.

At start each serving process `claim`s the journals whose writer is no longer running by
renaming them to `<journal>.replay-<pid>-<start>` (a rename is atomic: of several workers
starting at once, exactly one gets each file) and `restore`s their turns into its record
buffer, ahead of any new turn; they go to the store through the buffer's normal path, in order.
Invariants:

- a claimed journal is deleted only when none of its turns can be lost by deleting it: once
  every one has left the buffer (enqueued, or given up on as any buffered turn is), or once the
  ones still held are spilled again, fsync'd, at the next shutdown;
- the journal of a running process is never claimed (it may be writing it);
- a claimed journal whose claimer is gone (killed before that) is claimed again at the next
  start; its turns are then replayed again, and a turn that was already enqueued is enqueued
  only once if it is still its conversation's last (`RedisStore.record`), else stored twice —
  at least once, never lost (a double fault: a kill -9 during a replay);
- a line that cannot be decoded (a partial last line: the process died mid-write) is skipped
  and logged, never a crash; the other lines are replayed;
- with encryption on for a turn's tenant, its line holds the tenant in clear and the turn
  sealed (`{"v": 1, "tenant": ..., "sealed": ...}`); a line that does not open (a wrong key)
  keeps its file claimed and on disk for the next start, never skipped;
- replay keeps each turn's creation time, so a turn created before its user erased their
  memory is still refused by the store (`_RECORD_LUA`).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import anyio

from gateway.core.ids import ConversationKey
from gateway.core.messages import Message
from gateway.core.spend import TurnUsage
from gateway.pipeline.record_buffer import BufferedTurn, RecordBuffer
from gateway.store.codec import CodecError, record_from_dict, record_to_dict
from gateway.store.encryption.crypto import NO_ENCRYPTION, DecryptError, Encryption

log = logging.getLogger("gateway.record_journal")

PREFIX = "record-journal-"
VERSION = 1


def encode_turn(turn: BufferedTurn, encryption: Encryption = NO_ENCRYPTION) -> str:
    """One line of JSON (no newline inside: json.dumps escapes them), sealed for a tenant
    with a key."""
    line = _encode_plain(turn)
    tenant = turn.key.tenant
    if encryption.cipher(tenant) is None:
        return line
    return json.dumps({"v": VERSION, "tenant": tenant, "sealed": encryption.seal(tenant, line)},
                      ensure_ascii=False, separators=(",", ":"))


def _encode_plain(turn: BufferedTurn) -> str:
    data: dict[str, Any] = {
        "v": VERSION, "key": [turn.key.tenant, turn.key.user, turn.key.conversation],
        "request_id": turn.request_id, "created_at": turn.created_at,
        "incomplete_reply": turn.incomplete_reply}
    if turn.record is not None:
        data["record"] = record_to_dict(turn.record)
    else:
        data["incoming"] = [m.to_openai() for m in turn.incoming]
        data["reply"] = [m.to_openai() for m in turn.reply]
        if turn.usage is not None:
            data["usage"] = turn.usage.to_dict()
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def decode_turn(line: str, encryption: Encryption = NO_ENCRYPTION) -> BufferedTurn:
    """The turn `encode_turn` wrote, or `CodecError` (`DecryptError` if it does not open)."""
    try:
        data = json.loads(line)
        if isinstance(data, dict) and "sealed" in data:
            data = json.loads(encryption.open(str(data["tenant"]), str(data["sealed"])))
        if data["v"] != VERSION:
            raise ValueError(f"unknown journal version {data['v']!r}")
        tenant, user, conversation = data["key"]
        record = data.get("record")
        return BufferedTurn(
            key=ConversationKey(str(tenant), str(user), str(conversation)),
            request_id=str(data["request_id"]),
            record=record_from_dict(record) if record is not None else None,
            incoming=tuple(Message.from_openai(m) for m in data.get("incoming", ())),
            reply=tuple(Message.from_openai(m) for m in data.get("reply", ())),
            created_at=float(data["created_at"]),
            incomplete_reply=bool(data["incomplete_reply"]),
            usage=TurnUsage.from_dict(data["usage"]) if data.get("usage") else None)
    except (CodecError, DecryptError):
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"not a journalled turn: {exc!r}") from exc


class RecordJournal:
    """This process's journal in `directory`; see the module docstring."""

    def __init__(self, directory: Path, *, owner: str | None = None,
                 encryption: Encryption = NO_ENCRYPTION):
        self.directory = Path(directory)
        self.encryption = encryption
        self.owner = owner or process_identity(os.getpid()) or f"{os.getpid()}-0"
        """`<pid>-<start time>` of the process writing and claiming here."""
        self.path = self.directory / f"{PREFIX}{self.owner}.jsonl"
        self._claimed: list[Path] = []
        self._release: asyncio.Task[None] | None = None
        # Counters, for the shutdown log and tests.
        self.replayed = 0
        self.skipped = 0
        self.spilled = 0

    # -- start: claim and replay -----------------------------------------------------------

    async def replay_into(self, buffer: RecordBuffer) -> int:
        """Claim the journals left in the directory and restore their turns into `buffer`
        (before it starts). Their files are deleted once those turns have left the buffer.
        Returns how many turns were restored."""
        try:
            turns = await anyio.to_thread.run_sync(self.claim)
        except OSError as exc:  # an unreadable data dir: serve anyway, the journals wait
            # Files claimed so far stay on disk (never released by this process): the next
            # start after this one claims them again.
            self._claimed = []
            _event(logging.ERROR, "record_journal_unavailable", directory=str(self.directory),
                   error=repr(exc))
            return 0
        if not self._claimed:
            return 0
        buffer.restore(turns)
        self.replayed = len(turns)
        _event(logging.WARNING, "record_journal_replayed", turns=len(turns),
               skipped_lines=self.skipped, files=[p.name for p in self._claimed])
        self._release = asyncio.get_running_loop().create_task(
            self._release_when_settled(buffer, len(turns)), name="record-journal-release")
        return len(turns)

    def claim(self) -> list[BufferedTurn]:
        """Rename every journal whose writer and claimer (if any) are gone to this process's
        claim, then read them. Each file's turns keep their order; the files' are interleaved
        by creation time (several workers' journals: a conversation whose turns went to
        different workers gets them back in the order they were made)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        candidates = []
        for name in names:
            base, _, claimer = name.partition(".replay-")
            if not (base.startswith(PREFIX) and base.endswith(".jsonl")):
                continue
            writer = base.removeprefix(PREFIX).removesuffix(".jsonl")
            if owner_alive(writer) or (claimer and owner_alive(claimer)):
                continue
            candidates.append(self.directory / name)
        files: list[list[BufferedTurn]] = []
        for path in sorted(candidates):
            base = path.name.partition(".replay-")[0]
            mine = self.directory / f"{base}.replay-{self.owner}"
            try:
                os.rename(path, mine)
            except FileNotFoundError:
                continue  # another process claimed it first
            self._claimed.append(mine)
            try:
                files.append(self._read(mine))
            except (OSError, DecryptError) as exc:  # kept, claimed: the next start tries again
                self._claimed.remove(mine)
                _event(logging.ERROR, "record_journal_unreadable", file=mine.name,
                       error=repr(exc))
        if self._claimed:
            _fsync_dir(self.directory)  # the claims survive a crash
        return list(heapq.merge(*files, key=_created_at))

    def _read(self, path: Path) -> list[BufferedTurn]:
        turns = []
        with open(path, encoding="utf-8", errors="replace") as file:
            for number, line in enumerate(file, 1):
                if not line.strip():
                    continue
                try:
                    turns.append(decode_turn(line, self.encryption))
                except CodecError as exc:
                    self.skipped += 1
                    _event(logging.ERROR, "record_journal_line_skipped", file=path.name,
                           line=number, partial=not line.endswith("\n"), error=str(exc))
        return turns

    async def _release_when_settled(self, buffer: RecordBuffer, count: int) -> None:
        await buffer.settled(count)
        await anyio.to_thread.run_sync(self.release)

    def release(self) -> None:
        """Delete the claimed journals (their turns are in the store, or in a newer journal)."""
        for path in self._claimed:
            path.unlink(missing_ok=True)
        if self._claimed:
            _fsync_dir(self.directory)
            _event(logging.INFO, "record_journal_released",
                   files=[p.name for p in self._claimed])
        self._claimed = []

    # -- shutdown: spill -------------------------------------------------------------------

    async def close(self, left: Sequence[BufferedTurn]) -> None:
        """Spill the turns the buffer could not hand to the store, then delete the claimed
        journals (whose unsettled turns are among `left`). Never raises: a journal that
        cannot be written is logged with every turn lost, and the claimed files are kept."""
        if self._release is not None:
            self._release.cancel()
            await asyncio.gather(self._release, return_exceptions=True)
        try:
            await anyio.to_thread.run_sync(self.spill, left)
        except OSError as exc:
            _event(logging.ERROR, "record_journal_write_failed", turns=len(left),
                   path=str(self.path), error=repr(exc),
                   request_ids=[t.request_id for t in left])
            return
        await anyio.to_thread.run_sync(self.release)

    def spill(self, turns: Sequence[BufferedTurn]) -> None:
        """Append `turns` to this process's journal, one line each, durably (file and
        directory fsync'd) before returning. Nothing to spill writes nothing."""
        if not turns:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        text = "".join(encode_turn(t, self.encryption) + "\n" for t in turns).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            written = 0
            while written < len(text):
                written += os.write(fd, text[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(self.directory)
        self.spilled += len(turns)
        _event(logging.WARNING, "record_journal_spilled", turns=len(turns),
               path=str(self.path))


def process_identity(pid: int) -> str | None:
    """`<pid>-<start time>` of a running process (None if there is none): the start time in
    clock ticks since boot from /proc (Linux); elsewhere 0, and a reused pid looks alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except ProcessLookupError:
        return None  # it exited between the open and the read
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # Linux, and no such process
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return f"{pid}-0"
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    if fields[0] == "Z":
        return None  # exited, not yet reaped
    return f"{pid}-{fields[19]}"  # field 22 of stat: starttime


def owner_alive(owner: str) -> bool:
    """Whether the process `owner` (`<pid>-<start>`) still runs; a malformed name is not."""
    pid, _, start = owner.partition("-")
    if not (pid.isdigit() and start.isdigit()):
        return False
    return process_identity(int(pid)) == owner


def _created_at(turn: BufferedTurn) -> float:
    return turn.record.created_at if turn.record is not None else turn.created_at


def _fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _event(level: int, event: str, **fields: object) -> None:
    log.log(level, json.dumps({"event": event, **fields}, ensure_ascii=False))
