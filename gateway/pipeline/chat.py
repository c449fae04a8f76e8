"""One chat completion, from parsed request to upstream answer and recorded turn.

load the conversation ─► reconcile ─► core.rewrite ─► upstream ─► answer ─► enqueue the turn

The pipeline is the only place that touches the store and the upstream on the request path.
Failure policy: if the store fails, the client's own messages go upstream
unchanged and the log says why; upstream errors reach the client with the upstream's status;
a turn that cannot be enqueued is logged and counted, never raised to the client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Callable, Mapping, Protocol

import anyio

from gateway.pipeline.chat_request import ChatRequest
from gateway.core.ids import ConversationKey
from gateway.core.context.blocks import MemoryContext, PinnedMessage
from gateway.core.messages import Message, StoredMessage
from gateway.core.one_shot import restore, withhold
from gateway.core.context.cache_hints import CacheHint, with_cache_hint, without_cache_marks
from gateway.core.dialects.anthropic_outbound import kept_marks, tool_result_marks
from gateway.core.context.pinned import marked_pins
from gateway.core.spend import Price, TurnUsage, money, read_usage, turn_usage
from gateway.core.reply import StreamAssembler, chat_form, reply_from_completion
from gateway.core.context.rewrite import RewriteRequest, rewrite, split_current
from gateway.core.context.tool_loop import instruction_text
from gateway.core.context.whole import goes_whole
from gateway.core.text.tokens import Tokenizer, count_message, count_messages
from gateway.core.transcript import Reconciliation, reconcile
from gateway.errors import BadRequest, UpstreamError
from gateway.pipeline.brief import Briefs
from gateway.pipeline.history_costs import HistoryCosts
from gateway.pipeline.off_loop import OffLoop
from gateway.memory.recall.service import MemorySnapshot, RecallSettings
from gateway.ops.observability import Metrics, RequestLog
from gateway.ports import (ConversationStore, StreamChunk, Upstream, UpstreamCall,
                           chunk_data)
from gateway.pipeline.ratelimit import Limit, RateLimiter
from gateway.pipeline.record_buffer import BufferedTurn, RecordBuffer
from gateway.pipeline.request_history import RequestHistory
from gateway.pipeline.streams import ChatEncoder, StreamEncoder
from gateway.pipeline.tasks import TaskTracker
from gateway.config.tenants import ModelRoute, Tenant
from gateway.upstream.endpoint import cache_hint
from gateway.ops.tracing import Tracing

logger = logging.getLogger("gateway.pipeline")


class InlineRecorder(Protocol):
    async def process_available(self) -> int: ...


class Memory(Protocol):
    async def snapshot(self, key: ConversationKey, recall: RecallSettings,
                       query: str = "") -> MemorySnapshot: ...

    async def context_for(self, key: ConversationKey, query: str, recall: RecallSettings,
                          snapshot: MemorySnapshot | None = None, *,
                          own: bool = True) -> MemoryContext: ...

    async def pin(self, key: ConversationKey,
                  pins: tuple[PinnedMessage, ...]) -> tuple[PinnedMessage, ...]: ...


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready to go upstream, and what recording its turn needs."""

    call: UpstreamCall
    key: ConversationKey | None
    reconciliation: Reconciliation | None
    """None when nothing was reconciled (no conversation id, or the store could not be read)."""
    persist: bool
    incoming: tuple[Message, ...]
    """The client's own non-instruction messages, one-shot ones as placeholders (recorded as
    they are when the store could not be read and nothing was reconciled)."""
    limits: tuple[Limit, ...] = ()
    """The rate limits it was admitted under (its completion tokens are added to them)."""
    pins: tuple[PinnedMessage, ...] = ()
    """What the client's pin markers pin, stored once the turn is enqueued (empty when the
    turn is not persisted or the user's memory is off)."""
    reply_form: Callable[[Message], Message] | None = None
    """The form the client's dialect sends this reply back in (None: as the upstream gave it);
    recorded in that form, so the resent history reconciles."""
    price: Price | None = None
    """What the route's model costs (None: unknown, the spend is null)."""
    strip_usage: bool = False
    """The stream's usage was asked for by the gateway, not the client: its usage chunk is
    not passed on (gateway/pipeline/streams.py)."""
    started_at: float = 0.0
    """When the request was prepared (the pipeline's clock): its turn's `created_at`, so an
    erase or delete that comes while it is answered drops the turn (the store's fence)."""


class Pipeline:
    def __init__(self, *, store: ConversationStore, upstream: Upstream,
                 tokenizer_for: Callable[[str], Tokenizer], tasks: TaskTracker,
                 metrics: Metrics, inline_recorder: InlineRecorder | None = None,
                 memory: Memory | None = None,
                 recall_settings: Mapping[str, RecallSettings] | None = None,
                 buffer: RecordBuffer | None = None,
                 tracing: Tracing | None = None,
                 limiter: RateLimiter | None = None,
                 history: RequestHistory | None = None,
                 prices: Mapping[tuple[str, str], Price | None] | None = None,
                 clock: Callable[[], float] = time.time, briefs: Briefs | None = None,
                 off_loop: OffLoop | None = None):
        self.store = store
        self.upstream = upstream
        self.tokenizer_for = tokenizer_for
        self.tasks = tasks
        self.metrics = metrics
        self.inline_recorder = inline_recorder
        self.memory = memory
        self.recall_settings = recall_settings or {}
        """Per tenant with memory enabled; others get the transcript's recent turns only."""
        self.history_costs = HistoryCosts()
        """Each history's token costs, kept by chained id between requests."""
        self.clock = clock
        self.buffer = buffer
        """Turns the store could not take; None: they are logged and not recorded."""
        self.tracing = tracing
        """None (the default): tracing is off and no request makes a tracer call."""
        self.limiter = limiter
        self.history = history
        """None (the default, `console.enabled` false): no request is kept for the console."""
        self.prices = prices or {}
        """(tenant, model alias) → its price (gateway/upstream/prices.py); absent: unknown."""
        self._hints: dict[tuple[str, str], CacheHint | None] = {}
        self.off_loop = off_loop or OffLoop(metrics.off_loop_steps,
                                          yields=metrics.off_loop_yields)
        """Where a large request's heavy steps run (the door's parse too); it counts the
        requests in flight (`gateway_requests_in_flight` reads them)."""
        metrics.in_flight.set_function(lambda: self.off_loop.requests)
        self.briefs = briefs
        """None: no conversation has a memory brief (gateway/pipeline/brief.py)."""

    async def prepare(self, chat: ChatRequest, tenant: Tenant, key: ConversationKey | None,
                      persist: bool, log: RequestLog,
                      limits: tuple[Limit, ...] = ()) -> Prepared:
        """The request rewritten and admitted under `limits` (RateLimited if over one: then
        nothing is forwarded or recorded)."""
        started_at = self.clock()
        route = tenant.route(chat.model)
        tokenizer = self.tokenizer_for(route.model)
        messages, reconciliation, pins = chat.messages, None, ()
        stable: int | None = None
        # One-shot messages are forwarded as sent; only their placeholders (the kept form)
        # are reconciled and recorded (gateway/core/one_shot.py).
        incoming = kept = chat.incoming
        withheld = withhold(chat.messages, chat.one_shot, tenant.one_shot)
        if withheld.count:
            log.one_shot_messages = withheld.count
            kept = tuple(m for m in withheld.kept if not m.is_instruction)
        kept = without_cache_marks(kept)
        if key is None:
            log.passthrough = "no_conversation_id"
        else:
            started = time.perf_counter()
            # The transcript and memory's first reads go out together: one round trip each,
            # side by side (the question to recall for is known only after reconciling).
            stored, snapshot = await asyncio.gather(self.store.load(key),
                                                    self._snapshot(key, tenant, chat),
                                                    return_exceptions=True)
            if isinstance(stored, BaseException):
                if not isinstance(stored, Exception):
                    raise stored
                # Any store failure fails open, logged.
                logger.warning("store unavailable, forwarding unchanged: %r", stored)
                log.passthrough, log.error = "store_unavailable", repr(stored)
            else:
                log.load_ms = log.step("load", started)
                reconciliation, messages, stable = await self._rewrite(
                    chat, incoming, kept, tenant, key, stored, snapshot, tokenizer, log, persist)
                if chat.pinned and persist and isinstance(snapshot, MemorySnapshot) \
                        and snapshot.memory:
                    pins = marked_pins(chat.messages, chat.pinned, reconciliation, started_at)
        if reconciliation is None:
            log.tokens_original = log.tokens_forwarded = count_messages(messages, tokenizer)
        if limits and self.limiter is not None:
            await self.limiter.admit(limits, tenant.name, log.tokens_forwarded or 0)
        body = {**chat.passthrough, "messages": [m.to_openai() for m in messages]}
        strip_usage = False
        if chat.stream and route.stream_usage:
            # Usage is read from every answer: a stream's comes only when asked for. Asked for
            # here, it is kept from a client that did not ask (ChatEncoder).
            options = body.get("stream_options")
            options = options if isinstance(options, dict) else {}
            if options.get("include_usage") is not True:
                body["stream_options"] = {**options, "include_usage": True}
                strip_usage = True
        if key is not None and reconciliation is not None:
            hint = self._hint(tenant, route)
            if hint is not None:
                body = with_cache_hint(body, hint, key, stable,
                                       _marked_elsewhere(chat, messages))
        call = UpstreamCall(model=route.model, body=body,
                            api_base=route.api_base, api_key=route.api_key,
                            timeout=route.timeout, extra=dict(route.litellm_params),
                            native=chat.native)
        return Prepared(call, key, reconciliation, persist, kept, limits, pins, chat.reply_form,
                        self.prices.get((tenant.name, route.alias)), strip_usage, started_at)

    def _hint(self, tenant: Tenant, route: ModelRoute) -> CacheHint | None:
        """The route's prompt-cache hint, decided once per route."""
        name = (tenant.name, route.alias)
        if name not in self._hints:
            self._hints[name] = cache_hint(route.model, route.api_base, route.litellm_params,
                                           route.cache_hints)
        return self._hints[name]

    async def _rewrite(self, chat: ChatRequest, incoming: tuple[Message, ...],
                       kept: tuple[Message, ...], tenant: Tenant, key: ConversationKey,
                       stored: tuple[StoredMessage, ...],
                       snapshot: MemorySnapshot | BaseException | None, tokenizer: Tokenizer,
                       log: RequestLog, persist: bool = True
                       ) -> tuple[Reconciliation, tuple[Message, ...], int | None]:
        """(reconciliation, messages to forward, how many of them are the stable prefix:
        `Rewrite.stable_messages`). `kept`: the client's messages (`incoming`) with one-shot
        ones as placeholders — the same tuple when there is none: reconciled and recorded in
        that form, while the model sees the client's own."""
        large = self.off_loop.large_conversation(len(kept) + len(stored))
        reconciliation = await self.off_loop.run("reconcile", reconcile, kept, stored) \
            if large else reconcile(kept, stored)
        cap = tenant.request_limits.max_stored_messages
        if len(reconciliation.new) > cap:
            # The one thing the stored-messages cap refuses: a turn it could never hold (older
            # messages move to the archive; these would all be new at once).
            raise BadRequest(f"Invalid 'messages': {len(reconciliation.new)} new messages for "
                             f"this conversation, but it stores at most {cap} "
                             "(request_limits.max_stored_messages).", param="messages",
                             code="too_many_new_messages")
        if isinstance(snapshot, MemorySnapshot) and snapshot.memory and snapshot.topic:
            log.topic = snapshot.topic.label or None
            log.topic_segment = snapshot.topic.index
        conversation = reconciliation.conversation
        if kept is not incoming:
            conversation = restore(conversation, incoming)
        history, current = split_current(conversation)
        query = instruction_text(conversation)
        history_ids = reconciliation.conversation_ids[:len(history)]
        request = RewriteRequest(instructions=chat.instructions, history=history,
                                 current=current, policy=tenant.policy, history_ids=history_ids)
        settings = self.recall_settings.get(tenant.name)
        reserve = self.briefs.budget(key, settings) if self.briefs is not None else 0

        def counted() -> tuple[RewriteRequest, bool]:
            # The ids name the kept form: restored one-shot messages are counted as they are.
            costs = self.history_costs.costs(history, history_ids, tokenizer) \
                if kept is incoming and len(history_ids) == len(history) else None
            with_costs = replace(request, history_costs=costs)
            return with_costs, _searches_own(with_costs, stored, snapshot, tokenizer, reserve)
        request, own = await self.off_loop.run("count", counted) if large else counted()
        memory = await self._recall(key, tenant, query, snapshot, log, own=own)
        if self.briefs is not None:
            memory = await self.briefs.apply(key, settings, memory, query, snapshot, persist,
                                             tokenizer, log)
        started = time.perf_counter()
        request = replace(request, memory=memory)
        result = await self.off_loop.run("rewrite", rewrite, request, tokenizer) if large \
            else rewrite(request, tokenizer)
        log.rewrite_ms = log.step("rewrite", started)
        log.reconcile = reconciliation.kind
        log.recalled, log.summary_chunks = result.recalled, result.summary_chunks
        log.memory_tokens = {"summary": result.summary_tokens, "profile": result.profile_tokens,
                             "recalled": result.recalled_tokens}
        if log.brief_tokens is not None:
            log.brief_tokens = memory.brief_tokens if "brief" in result.memory_blocks else 0
        if memory.pinned:
            log.pinned = result.pinned
            log.memory_tokens["pinned"] = result.pinned_tokens
        log.tokens_original, log.tokens_forwarded = result.tokens_original, result.tokens_forwarded
        log.recent_turns, log.truncated = result.recent_turns, result.truncated
        log.stable_messages = result.stable_messages
        log.over_budget = result.over_budget
        if result.tool_results_cleared or result.exchanges_dropped:
            log.tool_results_cleared = result.tool_results_cleared
            log.exchanges_dropped = result.exchanges_dropped
        if self.history is not None:  # the console's diagnostics; nothing to do without it
            log.memory_blocks = result.memory_blocks
            log.recalled_items = recalled_items(memory, result.recalled_ids)
        return reconciliation, result.messages, result.stable_messages

    async def _snapshot(self, key: ConversationKey, tenant: Tenant,
                        chat: ChatRequest) -> MemorySnapshot | None:
        """Memory's first reads for this request (None: the tenant has no memory), with what
        its question asks of recall: the question as the client's own messages show it — the
        reconciled conversation ends with them, so it is the same one (if it is not, recall
        decides again for the right one)."""
        settings = self.recall_settings.get(tenant.name)
        if self.memory is None or settings is None:
            return None
        return await self.memory.snapshot(key, settings, instruction_text(chat.incoming))

    async def _recall(self, key: ConversationKey, tenant: Tenant, query: str,
                      snapshot: MemorySnapshot | BaseException | None,
                      log: RequestLog, *, own: bool = True) -> MemoryContext:
        """What memory offers for this request (`query`: the user's instruction it answers —
        the current message, or in a tool loop's step the instruction the loop works on);
        nothing (logged) if it cannot be read. `own`: false, recall searches only outside the
        conversation (`_searches_own`)."""
        settings = self.recall_settings.get(tenant.name)
        if self.memory is None or settings is None:
            return MemoryContext()
        started = time.perf_counter()
        try:
            if isinstance(snapshot, BaseException):
                raise snapshot
            return await self.memory.context_for(key, query, settings, snapshot, own=own)
        except Exception as exc:  # noqa: BLE001 — memory failures fail open, logged
            logger.warning("memory unavailable for request %s: %r", log.request_id, exc)
            log.memory_error = repr(exc)
            return MemoryContext()
        finally:
            log.recall_ms = log.step("recall", started)

    async def complete(self, prepared: Prepared, log: RequestLog) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            response = await self.upstream.complete(prepared.call)
        finally:
            log.upstream_ms = log.step("upstream", started)
        usage = response.get("usage") if isinstance(response, dict) else None
        log.usage = usage if isinstance(usage, dict) else None
        reply = _resent(prepared, reply_from_completion(response))
        log.tokens_completion = _usage_completion_tokens(response)
        counted = account(prepared, log)
        self._settle(prepared, reply, log)
        started = time.perf_counter()
        await self.record(prepared, [reply] if reply else [], log, usage=counted)
        log.step("record", started)
        return response

    async def open_stream(self, prepared: Prepared, log: RequestLog,
                          encoder: StreamEncoder | None = None) -> AsyncIterator[bytes]:
        """Start streaming: the first upstream chunk is read here, so an upstream that refuses
        raises UpstreamError before the client is sent a 200. Returns the SSE byte stream, in
        the chat dialect unless another door brings its `encoder`."""
        started = time.perf_counter()
        chunks = aiter(self.upstream.stream(prepared.call))
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            first = None
        finally:
            log.upstream_ms = log.step("upstream", started)
        return self._sse(prepared, first, chunks, log,
                         encoder or ChatEncoder(strip_usage=prepared.strip_usage))

    async def _sse(self, prepared: Prepared, first: StreamChunk | None,
                   chunks: AsyncIterator[StreamChunk], log: RequestLog,
                   encoder: StreamEncoder) -> AsyncIterator[bytes]:
        """Pass chunks through as server-sent events (the upstream's own bytes when it gave
        them), teeing them into the reply; whatever happens — completion, upstream failure,
        the client hanging up — the upstream stream is closed, the turn is recorded (an
        unfinished reply marked incomplete) and the request logged."""
        assembler = StreamAssembler()
        finished = False
        try:
            head = encoder.start(chunk_data(first) if first is not None else None)
            if head:
                yield head
            if first is not None:
                assembler.add(chunk_data(first))
                out = encoder.chunk(first)
                if out:
                    yield out
            async for chunk in chunks:
                assembler.add(chunk_data(chunk))
                out = encoder.chunk(chunk)
                if out:
                    yield out
            finished = True
            yield encoder.end()
        except UpstreamError as exc:
            log.status, log.error = exc.status, f"upstream failed mid-stream: {exc.message}"
            yield encoder.failure(exc)
        finally:
            try:
                # A client that hung up leaves the upstream stream open: close it now, so its
                # connection is freed and the upstream stops generating (shielded: this runs
                # in a cancelled scope then).
                with anyio.CancelScope(shield=True):
                    await _close(chunks)
            finally:
                if not finished and log.error is None:
                    log.error = "client disconnected"
                reply = _resent(prepared, assembler.message())
                log.usage = assembler.usage
                if log.tokens_completion is None:
                    log.tokens_completion = _usage_completion_tokens(log.usage)
                usage = account(prepared, log)
                self._settle(prepared, reply, log)
                # The log line is written by the shielded task, after recording: a client
                # that hangs up as soon as it reads [DONE] (the openai SDK does) cancels this
                # generator here, and the request must still be logged once.
                await self.tasks.shielded(
                    self._record_and_finish(prepared, [reply] if reply else [], log,
                                            incomplete=not finished or not assembler.complete,
                                            usage=usage),
                    name=f"record-{log.request_id}")

    async def _record_and_finish(self, prepared: Prepared, reply: list[Message], log: RequestLog,
                                 *, incomplete: bool, usage: TurnUsage | None = None) -> None:
        started = time.perf_counter()
        try:
            await self.record(prepared, reply, log, incomplete=incomplete, usage=usage)
        finally:
            log.step("record", started)
            self.finish(log)

    def _settle(self, prepared: Prepared, reply: Message | None, log: RequestLog) -> None:
        """Count the completion tokens against the request's token limits, in the background
        (tracked): the upstream's `usage` when it gave one, else the reply as counted here."""
        if self.limiter is None or not any(lim.kind == "tokens" for lim in prepared.limits):
            return
        if log.tokens_completion is None:
            log.tokens_completion = count_message(
                reply, self.tokenizer_for(prepared.call.model)) if reply else 0
        self.tasks.spawn(self.limiter.settle(prepared.limits, log.tokens_completion),
                         name=f"rate-settle-{log.request_id}")

    def finish(self, log: RequestLog) -> None:
        """The request's one log line, its metrics, and (tracing on) its spans."""
        log.emit()
        self.metrics.observe(log)
        if self.history is not None:
            self.history.add(log)
        if self.tracing is not None:
            try:
                self.tracing.request(log)
            except Exception:  # noqa: BLE001 — tracing never fails a request; logged
                logger.exception("could not trace request %s", log.request_id)

    async def record(self, prepared: Prepared, reply: list[Message], log: RequestLog, *,
                     incomplete: bool = False, usage: TurnUsage | None = None) -> None:
        """Enqueue the turn durably (the recorder applies it later, or now when inline).

        Never raises to the client. A turn the store cannot take goes to the record buffer,
        flushed in order when the store is back; so does a turn of a conversation that
        already has turns waiting there (it must not overtake them), and a turn whose request
        could not read the store (reconciled when flushed)."""
        log.persisted = False
        if not prepared.persist or prepared.key is None:
            return
        turn = self._buffered_turn(prepared, reply, log, incomplete, usage)
        if turn is None:
            return
        if self.buffer is not None and (turn.record is None or self.buffer.holds(turn.key)):
            self._buffer(turn, log)
            return
        if turn.record is None:
            return  # no buffer (tests), and nothing reconciled: not recorded, as logged
        try:
            await self.store.record(turn.key, turn.record)
        except Exception as exc:  # noqa: BLE001 — the client already has its answer; log it
            self.metrics.record_failures.inc()
            self.metrics.store_unavailable.labels("record").inc()
            log.error = f"record failed: {exc!r}"
            if self.buffer is None:
                logger.error("could not record turn of request %s: %r", log.request_id, exc)
                return
            logger.warning("could not enqueue turn of request %s, buffering it: %r",
                           log.request_id, exc)
            self._buffer(turn, log)
            return
        log.persisted = True
        if prepared.pins:
            await self._pin(prepared, log)
        if self.inline_recorder is not None:
            try:
                await self.inline_recorder.process_available()
            except Exception as exc:  # noqa: BLE001 — enqueued durably; applied later
                logger.error("inline recording of request %s failed: %r", log.request_id, exc)
                log.error = f"inline record failed: {exc!r}"

    async def _pin(self, prepared: Prepared, log: RequestLog) -> None:
        """Store the pins the client marked (after the turn is enqueued, so a pin never names
        a turn that was not). Never raises to the client: logged."""
        assert prepared.key is not None and self.memory is not None
        try:
            await self.memory.pin(prepared.key, prepared.pins)
            log.pins_marked = len(prepared.pins)
        except Exception as exc:  # noqa: BLE001 — the answer is given; the pin is logged lost
            logger.warning("could not pin messages of request %s: %r", log.request_id, exc)
            log.error = f"pin failed: {exc!r}"

    def _buffered_turn(self, prepared: Prepared, reply: list[Message], log: RequestLog,
                       incomplete: bool, usage: TurnUsage | None) -> BufferedTurn | None:
        """The turn to record, or None if there is nothing to record."""
        assert prepared.key is not None
        created_at = prepared.started_at
        if prepared.reconciliation is not None:
            record = prepared.reconciliation.record(reply, created_at=created_at,
                                                    request_id=log.request_id,
                                                    incomplete_reply=incomplete and bool(reply),
                                                    usage=usage)
            if not record.messages:
                return None
            return BufferedTurn(prepared.key, log.request_id, record=record)
        # A conversation id but no reconciliation: the store could not be read, and the
        # client's own messages were forwarded unchanged (fail open).
        incoming = prepared.incoming
        if not incoming and not reply:
            return None
        return BufferedTurn(prepared.key, log.request_id, incoming=incoming, reply=tuple(reply),
                            created_at=created_at, incomplete_reply=incomplete, usage=usage)

    def _buffer(self, turn: BufferedTurn, log: RequestLog) -> None:
        assert self.buffer is not None
        self.buffer.add(turn)
        log.record_buffered = True


def _searches_own(request: RewriteRequest, stored: tuple[StoredMessage, ...],
                  snapshot: MemorySnapshot | BaseException | None, tokenizer: Tokenizer,
                  reserve: int) -> bool:
    """Whether recall searches the conversation's own turns and chunks: not when the history
    goes upstream whole (`goes_whole`, with `reserve` tokens of room for a brief not made yet)
    and holds all of them — nothing of the conversation is archived (its first stored message
    has no parent) — since the rewrite would leave every one of them out as shown."""
    if not isinstance(snapshot, MemorySnapshot) or not snapshot.memory \
            or snapshot.namespaces.conversation is None:
        return True  # nothing of the conversation to search, or no memory at all
    if stored and stored[0].parent_id is not None:
        return True
    return not goes_whole(replace(request, memory=MemoryContext(pinned=snapshot.pinned)),
                          tokenizer, reserve=reserve)


def recalled_items(memory: MemoryContext,
                   shown: tuple[str, ...]) -> tuple[tuple[str, str, float], ...]:
    """(kind, id, score) of the recalled items forwarded (`shown`, in their order)."""
    by_id = {r.id: r for r in memory.recalled}
    return tuple((by_id[i].kind, i, round(by_id[i].score, 4)) for i in shown if i in by_id)


def account(prepared: Prepared, log: RequestLog) -> TurnUsage:
    """The request's usage counters from the upstream's `usage` (in `log.usage`), priced;
    noted in the log (its line, the metrics) and returned for the recorded turn."""
    usage = read_usage(log.usage)
    counted = turn_usage(usage, prepared.price, log.tokens_original, log.tokens_forwarded)
    if usage is not None:
        log.tokens_prompt, log.tokens_cached = usage.prompt, usage.cached
        if usage.cache_write:
            log.tokens_cache_write = usage.cache_write
    log.spend, log.whole_cost = money(counted.spend), money(counted.whole_cost)
    return counted


def _usage_completion_tokens(response: Mapping[str, Any] | None) -> int | None:
    usage = response.get("usage") if isinstance(response, Mapping) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    return tokens if isinstance(tokens, int) and tokens >= 0 else None


def _marked_elsewhere(chat: ChatRequest, messages: tuple[Message, ...]) -> int:
    """The client's breakpoints that go upstream outside the chat body: an Anthropic
    client's marks on the `tool_result` blocks forwarded as it sent them."""
    if chat.native is None or chat.native.dialect != "anthropic":
        return 0
    return kept_marks(tool_result_marks(chat.native.body), messages)


def _resent(prepared: Prepared, reply: Message | None) -> Message | None:
    """The reply in the form the client's dialect sends it back: what is recorded."""
    if reply is None:
        return None
    return (prepared.reply_form or chat_form)(reply)


async def _close(chunks: AsyncIterator[StreamChunk]) -> None:
    close = getattr(chunks, "aclose", None)  # async generators have it; a bare iterator not
    if close is not None:
        await close()
