"""The chat client against the loopback server: usage, retries with backoff, 429 + Retry-After, and clear
errors for an unknown model, a rejected key, a wrong URL and an unreachable endpoint."""

from __future__ import annotations

import pytest

from kernelwright.llm.client import ChatClient, EndpointError, RetryPolicy

MESSAGES = [{"role": "user", "content": "write a kernel"}]


def client_for(base_url: str, model: str, retries: int = 3):
    waits = []
    policy = RetryPolicy(retries=retries, base_delay_s=0.5, max_delay_s=8.0)
    client = ChatClient(model=model, base_url=base_url, api_key="sk-test", timeout_s=10, retry=policy,
                        sleep=waits.append)
    return client, waits


def test_reply_text_and_usage(replay_server):
    client, waits = client_for(replay_server.base_url, replay_server.model)
    reply = client.complete(MESSAGES, temperature=0.2)
    assert reply.text == "I have no answer for this problem."
    assert reply.usage == {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    assert reply.attempts == 1 and waits == []
    assert replay_server.requests[0]["temperature"] == 0.2


def test_rate_limit_waits_for_retry_after_then_succeeds(replay_server):
    replay_server.failures = [(429, {"Retry-After": "3"}), (429, {}), (503, {})]
    client, waits = client_for(replay_server.base_url, replay_server.model)
    retries = []
    client.on_retry = lambda reason, delay: retries.append(reason)
    reply = client.complete(MESSAGES)
    assert reply.attempts == 4
    assert waits[0] == 3.0, "the server's Retry-After wins"
    # Our own backoff doubles per attempt (jitter: 0.5 to 1 times the nominal 1 s, then 2 s).
    assert 0.5 <= waits[1] <= 1.0 and 1.0 <= waits[2] <= 2.0
    assert retries == ["HTTP 429", "HTTP 429", "HTTP 503"]


def test_gives_up_on_persistent_rate_limit(replay_server):
    replay_server.failures = [(429, {"Retry-After": "0"})] * 3
    client, waits = client_for(replay_server.base_url, replay_server.model, retries=2)
    with pytest.raises(EndpointError, match=r"still rate-limited \(HTTP 429\) after 3 attempt"):
        client.complete(MESSAGES)
    assert waits == [0.0, 0.0]


def test_unknown_model(replay_server):
    client, waits = client_for(replay_server.base_url, "no-such-model")
    with pytest.raises(EndpointError, match="unknown model 'no-such-model'.*does not exist.*--model"):
        client.complete(MESSAGES)
    assert waits == [], "an unknown model is not retried"


def test_rejected_key(replay_server):
    replay_server.failures = [(401, {})]
    client, _ = client_for(replay_server.base_url, replay_server.model)
    with pytest.raises(EndpointError, match="API key was rejected.*--api-key-env"):
        client.complete(MESSAGES)


def test_wrong_base_url(replay_server):
    client, _ = client_for(replay_server.base_url.removesuffix("/v1") + "/nothing-here", replay_server.model)
    with pytest.raises(EndpointError, match="no chat-completions route.*--base-url"):
        client.complete(MESSAGES)


def test_unreachable_endpoint_retries_then_fails_clearly(dead_url):
    client, waits = client_for(dead_url, "any-model", retries=2)
    with pytest.raises(EndpointError, match=f"cannot reach {dead_url}.*after 3 attempt.*--base-url"):
        client.complete(MESSAGES)
    assert len(waits) == 2 and waits[1] >= waits[0]
