"""A tenant's recall settings come from its config in one place: `RecallSettings` has no
defaults of its own, `RecallSettings.from_config` reads every field from the config model, and
the memory runtime uses what it builds. Pure: the runtime is built against a client of a
store that is never reached."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from gateway.config import TenantConfig, parse_config
from gateway.config.context import ContextConfig
from gateway.config.memory import TenantMemoryConfig
from gateway.config.tenants import TenantDirectory
from gateway.core.recall.ranker_weights import DEV_WEIGHTS
from gateway.core.recall.ranking import Ranker
from gateway.memory.embedders.hashing import HashEmbedder
from gateway.memory.recall.service import RecallSettings
from gateway.memory.runtime import build_memory
from gateway.store import connect
from gateway.upstream.fake import FakeUpstream


class Thresholds:
    """An embedder's recall thresholds, and nothing else."""

    def __init__(self, floor: float | None, gate: float | None):
        self.relevance_floor = floor
        self.relevance_gate = gate


SOURCES: dict[str, Callable[[TenantMemoryConfig, ContextConfig, Any], Any]] = {
    "top_k": lambda m, c, e: m.recall_top_k,
    "facts_k": lambda m, c, e: m.facts_k,
    "successors": lambda m, c, e: m.recall_successors,
    "successors_of": lambda m, c, e: m.recall_successors_of,
    "summaries": lambda m, c, e: c.summary_share > 0,
    "rrf_k": lambda m, c, e: m.recall_rrf_k,
    "ranker": lambda m, c, e: None if m.recall_ranking == "fusion"
    else Ranker.of(m.recall_ranker_weights or DEV_WEIGHTS),
    "chunks": lambda m, c, e: m.recall_chunks,
    "pins": lambda m, c, e: c.pinned_share > 0,
    "topics": lambda m, c, e: m.topics.enabled,
    "topic_boost": lambda m, c, e: m.topics.boost,
    "relevance_floor": lambda m, c, e: _own(m.recall_relevance_floor, e.relevance_floor),
    "relevance_gate": lambda m, c, e: _own(m.recall_relevance_gate, e.relevance_gate),
    "per_relevant": lambda m, c, e: m.recall_items_per_relevant,
    "across_conversations": lambda m, c, e: m.scope == "user",
    "tool_results": lambda m, c, e: m.recall_tool_results,
}
"""Where each recall setting comes from, spelled out independently of `from_config`."""


def _own(tenant: float | None, embedder: float | None) -> float | None:
    if tenant is not None:
        return None if tenant == -1 else tenant
    return embedder


OVERRIDES = TenantMemoryConfig(
    recall_top_k=12, facts_k=4, recall_successors=False, recall_successors_of="all",
    recall_rrf_k=60, recall_ranking="fusion", recall_chunks=True,
    recall_relevance_floor=-1, recall_relevance_gate=0.42, recall_items_per_relevant=0,
    recall_tool_results=True, scope="conversation",
    topics={"enabled": False, "boost": 0.5})
"""Every recall key of the memory section set away from its default."""


def test_recall_settings_have_no_defaults_of_their_own():
    with_default = [f.name for f in dataclasses.fields(RecallSettings)
                    if f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING]
    assert with_default == []
    with pytest.raises(TypeError):
        RecallSettings()  # type: ignore[call-arg]


def test_every_recall_setting_has_its_source_in_the_config():
    assert sorted(f.name for f in dataclasses.fields(RecallSettings)) == sorted(SOURCES)


@pytest.mark.parametrize("memory, context, embedder", [
    (TenantMemoryConfig(), ContextConfig(), HashEmbedder()),
    (TenantMemoryConfig(), ContextConfig(), Thresholds(0.1, 0.3)),
    (OVERRIDES, ContextConfig(summary_share=0.1, recall_share=0.85, pinned_share=0),
     Thresholds(0.1, 0.3)),
    (TenantMemoryConfig(recall_relevance_floor=0.2, recall_ranker_weights=dict(DEV_WEIGHTS)),
     ContextConfig(), Thresholds(None, None)),
], ids=["defaults", "defaults-calibrated-embedder", "every-key-set", "own-floor-and-weights"])
def test_recall_settings_are_the_configs_values(memory, context, embedder):
    settings = RecallSettings.from_config(memory, context, embedder)
    for name, source in SOURCES.items():
        assert getattr(settings, name) == source(memory, context, embedder), name


def test_the_settings_with_every_key_set_differ_from_the_defaults_in_every_field():
    """The `every-key-set` case above moves every field, so each one's source is checked."""
    default = RecallSettings.from_config(TenantMemoryConfig(), ContextConfig(),
                                         Thresholds(0.1, 0.3))
    moved = RecallSettings.from_config(
        OVERRIDES, ContextConfig(summary_share=0.1, recall_share=0.85, pinned_share=0),
        Thresholds(0.1, 0.3))
    assert [f.name for f in dataclasses.fields(RecallSettings)
            if getattr(default, f.name) == getattr(moved, f.name)] == []


def _tenant(key: str, memory: dict[str, Any]) -> dict[str, Any]:
    return {"api_keys": [{"sha256": key * 64}], "models": {"m": {"model": "fake/echo"}},
            "memory": memory}


async def test_the_memory_runtime_recalls_with_the_settings_built_from_each_tenants_config():
    config = parse_config({
        "memory": {"embedder": {"backend": "hash"}},
        "tenants": {"plain": _tenant("0", {}),
                    "tuned": _tenant("1", {"recall_top_k": 9, "recall_items_per_relevant": 0,
                                           "scope": "conversation", "recall_ranking": "fusion"}),
                    "off": _tenant("2", {"enabled": False})}})
    redis = connect("redis://127.0.0.1:1/0")  # never reached: building connects nothing
    runtime = build_memory(config, redis, FakeUpstream(), TenantDirectory(config))
    try:
        assert sorted(runtime.recall) == ["plain", "tuned"]
        for name, settings in runtime.recall.items():
            tenant: TenantConfig = config.tenants[name]
            assert settings == RecallSettings.from_config(tenant.memory, tenant.context,
                                                          HashEmbedder())
        assert runtime.recall["plain"].per_relevant == 3
        assert runtime.recall["tuned"].per_relevant == 0
    finally:
        runtime.close()
        await redis.aclose()

