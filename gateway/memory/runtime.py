"""Building the memory layers from the config: one place that wires adapters to processors.

The app's lifespan calls `build_memory` once per process and `close` at shutdown. Per-tenant
policy (compaction thresholds, fact caps, summariser and extractor models) becomes per-tenant
processor instances; the embedder, indexes and stores are shared by all tenants (their data
is partitioned by namespace, never by instance).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping

import redis.asyncio as aioredis

from gateway.config import Config, TenantConfig
from gateway.core.memory.compaction import CompactionPolicy
from gateway.core.memory.facts import FactPolicy
from gateway.core.ids import ConversationKey
from gateway.core.messages import StoredMessage
from gateway.core.memory.topics import TopicPolicy
from gateway.ops.job_metrics import JobMetrics
from gateway.memory.records.chunk_store import ChunkStore
from gateway.memory.jobs.compactor import Compactor
from gateway.memory.embedders import embedder_from_config
from gateway.memory.search.embedding import EmbeddingService
from gateway.memory.jobs.extractor import LlmFactExtractor
from gateway.memory.records.facts_store import FactStore
from gateway.memory.jobs.importance_pins import ImportancePinner
from gateway.memory.records.keys import MemoryKeySpace
from gateway.memory.jobs.knowledge import KnowledgeProcessor
from gateway.memory.search.lexical_index import Bm25LexicalIndex
from gateway.memory.jobs.message_memo import MessageMemo
from gateway.memory.records.pin_store import PinStore
from gateway.memory.records.profile_store import ProfileStore
from gateway.memory.recall.recaller import Recaller
from gateway.memory.recall.service import MemoryService, RecallSettings
from gateway.memory.records.settings_store import SettingsStore
from gateway.memory.jobs.summarizer import LlmSummarizer, Summarizer
from gateway.memory.jobs.topic_classifier import LlmTopicClassifier
from gateway.memory.records.topic_store import TopicStore
from gateway.memory.jobs.topic_tracker import TopicTracker
from gateway.memory.jobs.turn_index import TurnIndexer
from gateway.memory.jobs.user_index import UserRecallIndex
from gateway.memory.search.vector_index import FaissVectorIndex
from gateway.memory.jobs.worker import MemoryUpdate, MemoryWorker
from gateway.memory.ports import Embedder
from gateway.ports import Upstream
from gateway.store.cluster import key_space
from gateway.store.codec import encode_key
from gateway.store.encryption.crypto import NO_ENCRYPTION, Encryption
from gateway.store.redis_store import RedisStore
from gateway.store.transcript_cache import TranscriptCache
from gateway.config.tenants import TenantDirectory
from gateway.tokenizer import tokenizer_for_model
from gateway.ops.tracing import Tracing


@dataclass
class MemoryRuntime:
    service: MemoryService
    worker: MemoryWorker
    embedding: EmbeddingService
    vector_index: FaissVectorIndex
    lexical_index: Bm25LexicalIndex
    recall: Mapping[str, RecallSettings]
    """Per tenant; a tenant with memory disabled is absent."""

    def close(self) -> None:
        self.embedding.close()
        self.vector_index.close()
        self.lexical_index.close()


class _ForTenants:
    """A processor applied only to tenants with memory enabled, each with its own instance;
    its latency counted as job `kind` when `jobs` is given."""

    def __init__(self, name: str, by_tenant: Mapping[str, Callable[[MemoryUpdate], object]],
                 kind: str, jobs: JobMetrics | None,
                 embedding: EmbeddingService | None = None):
        """`embedding`: its batch sizes are counted with this job's metrics."""
        self.name = name
        self._by_tenant = by_tenant
        self._kind = kind
        self._jobs = jobs
        self._embedding = embedding

    async def process(self, update: MemoryUpdate) -> None:
        handler = self._by_tenant.get(update.key.tenant)
        if handler is None:
            return
        started = time.perf_counter()
        await handler(update)  # type: ignore[misc]
        if self._jobs is not None:
            await self._jobs.observe(self._kind, time.perf_counter() - started)
            if self._embedding is not None:
                await self._jobs.batches(self._embedding.take_batch_sizes())


def build_memory(config: Config, redis: aioredis.Redis, upstream: Upstream,
                 tenants: TenantDirectory, *, clock: Callable[[], float] = time.time,
                 tracing: Tracing | None = None,
                 jobs: JobMetrics | None = None,
                 encryption: Encryption = NO_ENCRYPTION,
                 embedder: Embedder | None = None,
                 transcripts: TranscriptCache | None = None) -> MemoryRuntime:
    """`jobs`: where the memory worker's job latency and retries are counted (its process
    passes one; a serving process that only recalls does not need it). `encryption`: every
    store of text seals and opens with it (vectors stay clear). `embedder`: instead of the
    one `memory.embedder` configures. `transcripts`: the process's cache of decoded
    transcripts, which the worker's loads share (none: a cache of its own)."""
    keys = MemoryKeySpace(key_space(config))
    sealed = {"encryption": encryption}
    e = config.memory.embedder
    if embedder is None:
        embedder = embedder_from_config(e.backend, e.model, e.threads)
    embedding = EmbeddingService(embedder)
    index = config.memory.index
    half = index.cache_mb << 19  # MiB / 2, in bytes
    vectors = FaissVectorIndex(redis, embedder.dim, keys, space=embedding.space, max_bytes=half)
    lexical = Bm25LexicalIndex(redis, keys, max_bytes=half, stem=index.stemming,
                               segment=index.segmentation, **sealed)
    chunks = ChunkStore(redis, keys, space=embedding.space, **sealed)
    profiles = ProfileStore(redis, keys, **sealed)
    settings = SettingsStore(redis, keys)
    enabled = {name: t for name, t in config.tenants.items() if t.memory.enabled}
    facts = {name: FactStore(redis, keys, embedding.embed,
                             related_threshold=embedder.related_threshold,
                             policy=_fact_policy(t), clock=clock, space=embedding.space,
                             **sealed)
             for name, t in enabled.items()}
    indexer = TurnIndexer(redis, embedding, keys, context=index.context_vectors, **sealed)
    user_index = UserRecallIndex(redis, keys, **sealed)
    pins = PinStore(redis, keys, **sealed)
    pinner = ImportancePinner(pins)
    # What compaction and topic tracking derive per message (both redact with the default).
    memo = MessageMemo()
    compactors = {name: _compactor(name, t, chunks, embedding, upstream, tenants, clock,
                                   embedder.topic_shift_threshold, memo)
                  for name, t in enabled.items()}
    topic_store = TopicStore(redis, keys, **sealed)
    trackers = {name: _tracker(name, t, topic_store, embedding, upstream, tenants,
                               embedder.topic_shift_threshold, memo)
                for name, t in enabled.items() if t.memory.topics.enabled}
    knowledge = {name: KnowledgeProcessor(facts[name], profiles,
                                          _extractor(name, t, upstream, tenants), clock)
                 for name, t in enabled.items()}
    processors = [
        _ForTenants("turn_index", {n: lambda u: indexer.sync(u.key, u.transcript,
                                                             writes=u.writes)
                                   for n in enabled}, "embed", jobs, embedding),
        # Tenants that show no pins (pinned_share 0) make none either.
        _ForTenants("pins", {n: pinner.process for n, t in enabled.items()
                             if t.context.pinned_share > 0}, "pins", jobs),
        # Before compaction: a finished topic is what compaction summarises early.
        _ForTenants("topics", {n: (lambda t: lambda u: t.process(u.key, u.transcript,
                                                                  writes=u.writes))(t)
                               for n, t in trackers.items()}, "topics", jobs, embedding),
        _ForTenants("compaction", {n: (lambda c, t: lambda u: _compact(
            c, u, keys, topic_store if t else None))(c, n in trackers)
            for n, c in compactors.items()}, "summarise", jobs),
        # After both: the user-level recall index copies the conversation's turns and chunks
        # (identified users only: `sync` skips the anonymous user).
        _ForTenants("user_index", {n: (lambda tools: lambda u: user_index.sync(
            u.key, u.transcript, tool_results=tools,
            writes=u.writes))(t.memory.recall_tool_results)
            for n, t in enabled.items()}, "user_index", jobs),
        # Facts and the profile span a user's conversations: only for identified users.
        _ForTenants("knowledge", {n: (lambda k: lambda u: k.process(
            u.key, u.transcript, u.new,
            u.settings.auto_extract and u.key.identified, writes=u.writes))(k)
            for n, k in knowledge.items()}, "extract", jobs),
    ]
    worker_config = config.memory.worker
    store = RedisStore(redis, keys.store, cache=transcripts, **sealed)
    caps = {n: config.request_limits_for(n).max_stored_messages for n in enabled}

    async def archive(key: ConversationKey, branch: tuple[StoredMessage, ...]) -> int:
        # Tenants without memory: nothing is indexed, so nothing moves (docs/memory.md, "Long
        # conversations: the stored-messages cap"). A
        # branch within the cap has a transcript within it too (it is the branch's tail):
        # no store round trip until a conversation is that long.
        cap = caps.get(key.tenant)
        if cap is None or len(branch) <= cap:
            return 0
        return await store.archive.trim(key, branch, cap)

    worker = MemoryWorker(redis, processors, keys=keys, settings=settings,
                          poll_seconds=worker_config.poll_seconds,
                          lock_ms=int(worker_config.lock_seconds * 1000),
                          max_attempts=worker_config.max_attempts,
                          backoff_seconds=worker_config.backoff_seconds,
                          heartbeat_seconds=worker_config.heartbeat_seconds,
                          slice_messages=worker_config.slice_messages,
                          concurrency=worker_config.concurrency,
                          transcripts=store.applied, clock=clock,
                          tracing=tracing, jobs=jobs, archive=archive)
    service = MemoryService(embedding=embedding, recaller=Recaller(embedding, vectors, lexical,
                                                                   redis, keys, **sealed),
                            vector_index=vectors, chunks=chunks, profiles=profiles,
                            settings=settings, facts=facts, pins=pins, topics=topic_store)
    recall = {name: RecallSettings.from_config(t.memory, t.context, embedder)
              for name, t in enabled.items()}
    return MemoryRuntime(service, worker, embedding, vectors, lexical, recall)


async def _compact(compactor: Compactor, update: MemoryUpdate, keys: MemoryKeySpace,
                   topics: TopicStore | None) -> None:
    """`topics`: where the topic tracker (run just before) keeps the current topic; None
    when the tenant tracks no topics (compaction then judges topic shifts itself)."""
    topic_start = None
    if topics is not None:
        current = await topics.current(update.key)
        topic_start = current.start if current is not None else 0
    result = await compactor.process(update.key, update.transcript, topic_start=topic_start,
                                     writes=update.writes)
    if result.pending:
        # One run makes a bounded number of chunks; mark the conversation again for the rest.
        async with update.writes.transaction() as pipe:
            pipe.zadd(keys.store.memory_dirty_of(update.key),
                      {encode_key(update.key): time.time()})
            await pipe.execute()


def _fact_policy(tenant: TenantConfig) -> FactPolicy:
    f = tenant.memory.facts
    return FactPolicy(max_facts=f.max_facts, max_preferences=f.max_preferences,
                      half_life_days=f.half_life_days, drop_below=f.drop_below)


def _compactor(name: str, tenant: TenantConfig, chunks: ChunkStore,
               embedding: EmbeddingService, upstream: Upstream,
               tenants: TenantDirectory, clock: Callable[[], float],
               topic_shift_threshold: float, memo: MessageMemo) -> Compactor:
    c = tenant.memory.compaction
    llm = None
    if tenant.memory.summarizer_model is not None:
        route = tenants.tenant(name).route(tenant.memory.summarizer_model)
        llm = LlmSummarizer(upstream, route.model, api_base=route.api_base,
                            api_key=route.api_key, timeout=min(route.timeout, 60.0),
                            extra=route.litellm_params)
    # Summaries are counted like prompts; cl100k is a fair measure for any model.
    tokenizer = tokenizer_for_model("")
    return Compactor(chunks, Summarizer(tokenizer, llm, keywords=tenant.memory.keywords),
                     embedding.embed, tokenizer,
                     CompactionPolicy(min_rounds=c.min_rounds, min_tokens=c.min_tokens,
                                      recent_window_turns=c.recent_window_turns,
                                      max_chunks=c.max_chunks,
                                      chunk_max_tokens=c.chunk_max_tokens,
                                      topic_shift_min_rounds=c.topic_shift_min_rounds),
                     related_threshold=c.topic_shift_similarity
                     if c.topic_shift_similarity is not None else topic_shift_threshold,
                     clock=clock, memo=memo, tool_results=tenant.memory.recall_tool_results)


def _tracker(name: str, tenant: TenantConfig, store: TopicStore, embedding: EmbeddingService,
             upstream: Upstream, tenants: TenantDirectory,
             topic_shift_threshold: float, memo: MessageMemo) -> TopicTracker:
    t, c = tenant.memory.topics, tenant.memory.compaction
    classifier = None
    if t.classifier and tenant.memory.summarizer_model is not None:
        route = tenants.tenant(name).route(tenant.memory.summarizer_model)
        classifier = LlmTopicClassifier(upstream, route.model, api_base=route.api_base,
                                        api_key=route.api_key, timeout=min(route.timeout, 10.0),
                                        extra=route.litellm_params)
    threshold = next(v for v in (t.similarity, c.topic_shift_similarity, topic_shift_threshold)
                     if v is not None)
    return TopicTracker(store, embedding, TopicPolicy(window_turns=t.window_turns,
                                                      min_turns=t.min_turns,
                                                      label_words=t.label_words),
                        threshold=threshold, classifier=classifier, memo=memo)


def _extractor(name: str, tenant: TenantConfig, upstream: Upstream,
               tenants: TenantDirectory) -> LlmFactExtractor | None:
    if tenant.memory.extractor_model is None:
        return None
    route = tenants.tenant(name).route(tenant.memory.extractor_model)
    return LlmFactExtractor(upstream, route.model, api_base=route.api_base,
                            api_key=route.api_key, timeout=min(route.timeout, 30.0))
