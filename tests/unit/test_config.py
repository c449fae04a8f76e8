"""The config is strict, typed, and names the key to fix."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.config import ContextConfig, hash_key, load_config, parse_config
from gateway.config.memory import CompactionConfig
from gateway.core.memory.compaction import CompactionPolicy
from gateway.core.recall.ranker_weights import DEV_WEIGHTS
from gateway.core.recall.ranking import FEATURES, Ranker
from gateway.core.policy import ContextPolicy
from gateway.errors import ConfigError
from gateway.config.tenants import TenantDirectory

ROOT = Path(__file__).resolve().parents[2]


def minimal(**tenant_extra):
    return {"tenants": {"acme": {"api_keys": [{"sha256": hash_key("k")}],
                                 "models": {"m": {"model": "fake/echo"}}, **tenant_extra}}}


def error_of(data) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return str(info.value)


def test_the_shipped_config_is_valid_and_has_the_demo_tenant():
    config = load_config(ROOT / "config.yaml")
    tenant = TenantDirectory(config).authenticate("Bearer demo-key")
    assert tenant.name == "demo" and tenant.route("demo").model == "fake/echo"
    assert config.store == "embedded"
    # The demo tenant runs on the shipped defaults the README's figures describe.
    assert config.tenants["demo"].context == ContextConfig()


@pytest.mark.parametrize("data, key", [
    (minimal(context={"max_recent_turns": 0}), "tenants.acme.context.max_recent_turns"),
    (minimal(context={"max_recnt_turns": 3}), "tenants.acme.context.max_recnt_turns"),
    (minimal(context={"pinned_share": 1.5}), "tenants.acme.context.pinned_share"),
    (minimal(context={"pinned_share": "lots"}), "tenants.acme.context.pinned_share"),
    (minimal(models={"m": {"model": "fake/echo", "api_key": "sk-literal"}}),
     "tenants.acme.models.m.api_key"),
    ({**minimal(), "server": {"port": 70000}}, "server.port"),
    ({**minimal(), "server": {"malloc_trim_seconds": -1}}, "server.malloc_trim_seconds"),
    ({**minimal(), "store": "postgres://x"}, "store"),
    ({**minimal(), "recorder": {"mode": "sometimes"}}, "recorder.mode"),
    (minimal(api_keys=[{"sha256": "nothex"}]), "tenants.acme.api_keys.0"),
    (minimal(api_keys=[{"env": "A", "sha256": hash_key("x")}]), "tenants.acme.api_keys.0"),
    (minimal(headers={"conversation_id": "bad header"}), "tenants.acme.headers.conversation_id"),
    ({"tenants": {}}, "tenants"),
    (minimal(memory={"recall_ranking": "magic"}), "tenants.acme.memory.recall_ranking"),
    (minimal(memory={"recall_ranker_weights": {"length": 1.0}}),
     "tenants.acme.memory.recall_ranker_weights"),
])
def test_invalid_config_names_the_dotted_key(data, key):
    assert key in error_of(data)


def test_the_learned_ranking_is_on_by_default_with_the_shipped_weights():
    weights = {f: 0.5 for f in FEATURES}
    tenants = parse_config(minimal()).tenants
    assert tenants["acme"].memory.ranker() == Ranker.of(DEV_WEIGHTS)
    # measured: bench/README.md, "Learned ranking"
    assert tenants["acme"].memory.recall_chunks is False
    own = parse_config(minimal(memory={"recall_ranker_weights": weights})).tenants
    assert own["acme"].memory.ranker() == Ranker.of(weights)
    off = parse_config(minimal(memory={"recall_ranking": "fusion"})).tenants
    assert off["acme"].memory.ranker() is None
    message = error_of(minimal(memory={"recall_ranker_weights": {**weights, "mood": 1}}))
    assert "unknown ['mood']" in message


def test_reserve_must_leave_room_for_the_prompt():
    message = error_of(minimal(context={"max_context_tokens": 100,
                                        "reserve_completion_tokens": 100}))
    assert "tenants.acme.context" in message and "reserve_completion_tokens" in message


def test_missing_environment_variable_is_named(monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    assert "tenants.acme.api_keys.0.env: environment variable NOPE_KEY" in error_of(
        minimal(api_keys=[{"env": "NOPE_KEY"}]))
    assert "tenants.acme.models.m.api_key_env" in error_of(
        minimal(models={"m": {"model": "openai/x", "api_key_env": "NOPE_KEY"}}))


def test_env_interpolation_and_env_keys(monkeypatch):
    monkeypatch.setenv("ACME_KEY", "secret-1")
    monkeypatch.setenv("UPSTREAM", "http://up.test/v1")
    config = parse_config(minimal(
        api_keys=[{"env": "ACME_KEY"}],
        models={"m": {"model": "openai/x", "api_base": "${UPSTREAM}"}},
    ) | {"store": "${NOT_SET_STORE:-embedded}"})
    directory = TenantDirectory(config)
    assert directory.authenticate("Bearer secret-1").route("m").api_base == "http://up.test/v1"
    assert config.store == "embedded"


def test_a_key_shared_by_two_tenants_is_refused():
    data = minimal()
    data["tenants"]["other"] = data["tenants"]["acme"]
    assert "also configured for tenant" in error_of(data)


def test_check_config_command_prints_the_same_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(minimal(context={"max_recent_turns": -1})))
    result = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "tenants.acme.context.max_recent_turns" in result.stderr
    good = subprocess.run([sys.executable, "-m", "gateway", "check-config",
                           str(ROOT / "config.yaml")], capture_output=True, text=True, timeout=60)
    assert good.returncode == 0 and "OK" in good.stdout


def test_core_policy_defaults_are_the_config_defaults():
    assert ContextConfig().policy() == ContextPolicy()
    policy = CompactionPolicy()
    for name, value in CompactionConfig().model_dump().items():
        if hasattr(policy, name):
            assert getattr(policy, name) == value, name


def test_the_pinned_share_is_granted_first_so_it_is_not_part_of_the_other_shares_sum():
    config = parse_config(minimal(context={"pinned_share": 0.5, "profile_share": 0.05,
                                           "recall_share": 0.95}))
    assert config.tenants["acme"].context.policy().pinned_share == 0.5
    assert parse_config(minimal()).tenants["acme"].context.policy().pinned_share == 0.25


def test_check_config_names_a_route_whose_provider_litellm_does_not_know(tmp_path):
    data = minimal(models={"m": {"model": "fake/echo"}, "typo": {"model": "opnai/gpt-4o-mini"},
                           "bare": {"model": "gpt-4o-mini"},
                           "claude": {"model": "anthropic/claude-3-5-haiku"},
                           "nowhere": {"model": "zzqx/some-model"}})
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    result = subprocess.run([sys.executable, "-m", "gateway", "check-config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr  # the two bad routes, and only those
    assert lines[0].startswith("tenants.acme.models.nowhere.model: `zzqx`")
    assert lines[1].startswith("tenants.acme.models.typo.model: `opnai`")
    assert "did you mean `openai`?" in lines[1]


def test_the_provider_list_is_read_from_litellm_without_importing_it():
    script = ("import json, sys; from gateway.upstream.providers import litellm_providers; "
              "print(json.dumps(sorted(litellm_providers()))); print('litellm' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    listed, imported = result.stdout.strip().splitlines()
    assert {"openai", "anthropic", "azure", "bedrock", "vertex_ai", "hosted_vllm"} <= \
        set(json.loads(listed))
    assert imported == "False"
