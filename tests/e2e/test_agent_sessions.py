"""Issue 37's targets over agent sessions: a stateless Claude Code-like client (thinking with
signatures, `<system-reminder>` blocks after tool results, 2-20k-token results, its own
`cache_control`) and an OpenAI tool loop, 40 requests each, through both doors with the real
`anthropic` and `openai` SDKs, streaming and not, to the strict fake upstream (the providers'
400 rules), at `context.max_context_tokens: 16000`.

Every session runs once per module (bench/agent: the generator, the driver and the measures
`python -m bench agent` reports); each test checks one target over every request of a session
and names the steps that break it.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

import pytest

from bench.agent.drive import Driver, Endpoints, Step
from gateway.core.policy import ContextPolicy
from gateway.upstream.fake_server import create_fake_app
from tests.support.gateway import KEYS, gateway_config, running_gateway
from tests.support.servers import serve

STEPS = 40
WINDOW = 16000
BUDGET = ContextPolicy(max_context_tokens=WINDOW).whole_prompt_budget
"""What a forwarded prompt may cost: the window less the completion's reserve."""
KEY_ENV = "AGENT_SESSIONS_UPSTREAM_KEY"
ALIASES = {"anthropic": "agent-claude", "chat": "agent-chat"}
SESSIONS = [pytest.param(d, s, id=f"{d}-{'stream' if s else 'whole'}")
            for d in ("anthropic", "chat") for s in (False, True)]


@pytest.fixture(scope="module")
def play(valkey_server_url: str) -> Iterator[Callable[[str, bool], list[Step]]]:
    """`play(dialect, stream)`: the steps of that session, run on first use through one gateway
    and one fake for the module."""
    os.environ.setdefault(KEY_ENV, "sk-fake")
    played: dict[tuple[str, bool], list[Step]] = {}
    with serve(create_fake_app()) as fake_url:
        models = {ALIASES["chat"]: {"model": "openai/agent", "api_base": f"{fake_url}/v1",
                                    "api_key_env": KEY_ENV},
                  ALIASES["anthropic"]: {"model": "anthropic/agent", "api_base": fake_url,
                                         "api_key_env": KEY_ENV}}
        config = gateway_config(valkey_server_url, models=models,
                                context={"max_context_tokens": WINDOW})
        with running_gateway(config) as gateway_url:

            def run(dialect: str, stream: bool) -> list[Step]:
                if (dialect, stream) not in played:
                    endpoints = Endpoints(gateway_url, fake_url, KEYS["acme"], ALIASES[dialect])
                    driver = Driver(dialect, endpoints, BUDGET, stream=stream)
                    try:
                        played[dialect, stream] = driver.run(
                            f"agent-e2e-{dialect}-{stream}-{os.getpid()}", STEPS)
                    finally:
                        driver.close()
                return played[dialect, stream]

            yield run


def _broken(steps: list[Step], ok: Callable[[Step], bool], show: Callable[[Step], str]) -> str:
    bad = [s for s in steps if not ok(s)]
    return f"{len(bad)} of {len(steps)} requests: " + "; ".join(
        f"step {s.step}: {show(s)}" for s in bad[:8]) if bad else ""


@pytest.mark.parametrize("dialect,stream", SESSIONS)
def test_no_request_is_rejected_and_the_client_gets_no_error(play, dialect, stream):
    steps = play(dialect, stream)
    assert len(steps) == STEPS
    broken = _broken(steps, lambda s: s.status == 200 and s.forwarded_count == 1
                     and s.upstream_status == 200,
                     lambda s: f"client {s.status} {s.error[:160]!r}, forwarded "
                               f"{s.forwarded_count}×, upstream {s.upstream_status}")
    assert not broken, broken


@pytest.mark.parametrize("dialect,stream", SESSIONS)
def test_the_task_and_later_instruction_are_in_every_forwarded_request(play, dialect, stream):
    steps = play(dialect, stream)
    broken = _broken(steps, lambda s: s.task_kept is True and s.instruction_kept is not False,
                     lambda s: f"task kept {s.task_kept}, instruction kept "
                               f"{s.instruction_kept}")
    assert not broken, broken


@pytest.mark.parametrize("dialect,stream", SESSIONS)
def test_the_newest_tool_results_reach_the_model_whole(play, dialect, stream):
    steps = play(dialect, stream)[1:]  # the first request has no result yet
    broken = _broken(steps, lambda s: s.results_whole is True,
                     lambda s: f"results whole: {s.results_whole}")
    assert not broken, broken


@pytest.mark.parametrize("dialect,stream", SESSIONS)
def test_forwarded_tokens_stay_within_budget_whenever_the_newest_exchange_fits(
        play, dialect, stream):
    steps = [s for s in play(dialect, stream) if s.essential_tokens <= BUDGET]
    assert len(steps) > STEPS // 2  # most newest exchanges fit a 16,000 window
    broken = _broken(steps, lambda s: s.forwarded_tokens is not None
                     and s.forwarded_tokens <= BUDGET,
                     lambda s: f"forwarded {s.forwarded_tokens} > {BUDGET} (newest exchange "
                               f"{s.essential_tokens}, history {s.original_tokens})")
    assert not broken, broken


@pytest.mark.parametrize("dialect,stream", SESSIONS)
def test_past_twice_the_budget_every_request_is_compacted(play, dialect, stream):
    steps = [s for s in play(dialect, stream) if s.original_tokens > 2 * BUDGET]
    assert len(steps) > STEPS // 2  # the sessions do grow far past the window
    broken = _broken(steps, lambda s: s.compacted,
                     lambda s: f"forwarded {s.forwarded_tokens} of {s.original_tokens}")
    assert not broken, broken


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_requests_carry_at_most_four_breakpoints_one_inside_messages(play, stream):
    steps = [s for s in play("anthropic", stream) if s.forwarded_count]
    broken = _broken(steps, lambda s: s.breakpoints <= 4 and s.breakpoints_in_messages >= 1,
                     lambda s: f"{s.breakpoints} breakpoints, {s.breakpoints_in_messages} in "
                               f"messages")
    assert not broken, broken
