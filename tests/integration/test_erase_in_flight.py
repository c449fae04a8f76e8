"""An erase that comes while one of the user's requests is being answered: the client gets its
answer, but neither the request's turn nor (Responses door) the response nor the console's entry
for it is kept — nothing the user said before the erase, nor their id, is in the store
afterwards. A request made after the erase is kept as usual. The real app over HTTP, the real
`openai` SDK, a real store (Debian's redis-server and a 3-master Valkey cluster, every node
looked through), the fake upstream's slow model holding the answer while the erase runs."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Callable, Iterator

import httpx
import openai
import pytest

from gateway.config import hash_key
from tests.support.gateway import KEYS, gateway_config, running_gateway
from tests.support.store_dump import keys_mentioning

SLOW_S = 1.5
USER = "yara-4T"


@pytest.fixture(params=["redis-server", "cluster"])
def store(request: pytest.FixtureRequest) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """(the gateway's store URL, every node's URL, the config's cluster keys)."""
    if request.param == "redis-server":
        url = request.getfixturevalue("redis_url")
        return url, (url,), {}
    cluster = request.getfixturevalue("valkey_cluster")
    cluster.flush()
    return (cluster.url, tuple(f"redis://127.0.0.1:{port}/0" for port in cluster.ports),
            {"store_cluster": {"enabled": True, "shards": 4}})


@pytest.fixture
def gateway_url(store: tuple[str, tuple[str, ...], dict[str, Any]]) -> Iterator[str]:
    url, _, cluster = store
    models = {"slower": {"model": f"fake/slow-{int(SLOW_S * 1000)}"}}
    config = gateway_config(url, models=models, console={"enabled": True},
                            admin={"keys": [{"sha256": hash_key("admin-key")}]}, **cluster)
    with running_gateway(config) as base_url:
        yield base_url


@pytest.fixture
def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEYS["acme"], max_retries=0)


def ask(client: openai.OpenAI, door: str, model: str, text: str, user: str = USER) -> str:
    """The answer's text to `text`, asked through `door` in the user's conversation."""
    headers = {"X-User-Id": user, "X-Conversation-Id": f"in-flight-{door}"}
    if door == "chat":
        completion = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": text}], extra_headers=headers)
        return completion.choices[0].message.content or ""
    if door == "responses":
        return client.responses.create(model=model, input=text, extra_headers=headers).output_text
    with client.responses.stream(model=model, input=text, extra_headers=headers) as stream:
        return stream.get_final_response().output_text


def erased_while(gateway_url: str, answer: Callable[[], str]) -> str:
    """`answer()`'s result, the user erased while the upstream holds it (a third of its delay
    after the request was sent: the app is warm, the request is upstream by then)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(answer)
        time.sleep(SLOW_S / 3)
        assert not pending.done()
        response = httpx.delete(gateway_url + "/v1/memory", timeout=60, headers={
            "Authorization": f"Bearer {KEYS['acme']}", "X-User-Id": USER})
        assert response.status_code == 200, response.text
        assert not pending.done()  # the erase came while the request was being answered
        return pending.result(timeout=60)


@pytest.mark.parametrize("door", ["chat", "responses", "responses-stream"])
def test_a_request_answered_during_an_erase_leaves_nothing_behind(gateway_url, store, client,
                                                                  door):
    nodes = store[1]
    ask(client, door, "echo", "A first request warms the app up.", user="warm-up")
    said = erased_while(gateway_url, lambda: ask(client, door, "slower", "Remember Vextral."))
    assert "Vextral" in said  # the client got its answer (the fake echoes)
    # The turn was refused when it was enqueued, before the answer was sent (and a streamed
    # response's last event waits for its turn and its response to be stored).
    assert keys_mentioning(nodes, "Vextral") == []
    # The console's request log is written in the background, in order: once a later request's
    # entry is there, the one of the request answered during the erase was dropped, not kept.
    ask(client, door, "echo", "A later request of someone else.", user="later-user")
    deadline = time.monotonic() + 30
    while not [k for k in keys_mentioning(nodes, "later-user") if k.endswith(":lastreq")]:
        assert time.monotonic() < deadline, "the later request's entry was never written"
        time.sleep(0.05)
    assert keys_mentioning(nodes, USER) == []

    # After the erase the user is remembered again from the next request on.
    ask(client, door, "echo", "Remember Quorrin.")
    assert keys_mentioning(nodes, "Quorrin")
