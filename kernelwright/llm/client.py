"""A chat-completions client for any OpenAI-compatible endpoint, with the robustness a long run needs:
request timeouts, retries with exponential backoff, HTTP 429 handling that honours `Retry-After`, and
one clear `EndpointError` for an unreachable endpoint, a rejected key or an unknown model.

The API key is handed to the `openai` client and nowhere else: it is never part of a message, a record
or a log line.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import openai

from kernelwright.errors import KernelwrightError

# Statuses worth retrying: the server is busy, restarting or timed out, not rejecting the request.
RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointError(KernelwrightError):
    """The chat endpoint cannot be used: unreachable, key rejected, unknown model, or it kept failing."""


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 5  # extra attempts after the first one
    base_delay_s: float = 1.0  # first backoff; doubles on each retry
    max_delay_s: float = 60.0  # cap for one wait, also for a server's Retry-After

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1-based). A server's Retry-After wins; our own
        backoff gets jitter so that parallel samples hitting one limit do not retry in lockstep."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay_s)
        backoff = min(self.base_delay_s * 2 ** (attempt - 1), self.max_delay_s)
        return backoff * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class ChatReply:
    text: str
    usage: dict[str, int]  # prompt_tokens, completion_tokens, total_tokens (0 when not reported)
    model: str
    finish_reason: str | None
    latency_s: float
    attempts: int  # 1 + retries used


@dataclass
class ChatClient:
    model: str
    base_url: str | None
    api_key: str = field(repr=False)
    timeout_s: float = 600.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Told about each retry (reason, seconds until the next attempt), e.g. to show it in the live view.
    on_retry: Callable[[str, float], None] | None = None
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        # Our own retry loop (below) replaces the client's, so that waits are visible and testable.
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0
        )

    @property
    def endpoint(self) -> str:
        return str(self._client.base_url).rstrip("/")

    def complete(self, messages: list[dict[str, str]], temperature: float | None = None) -> ChatReply:
        """One chat completion, retried on transient failures; raises `EndpointError` when it gives up."""
        extra = {} if temperature is None else {"temperature": temperature}
        attempt = 0
        while True:
            attempt += 1
            start = time.monotonic()
            try:
                response = self._client.chat.completions.create(model=self.model, messages=messages, **extra)
            except openai.APIStatusError as exc:
                if exc.status_code not in RETRYABLE_STATUS:
                    raise self._status_error(exc) from None
                reason, retry_after = f"HTTP {exc.status_code}", _retry_after(exc)
                if attempt > self.retry.retries:
                    raise self._gave_up(reason, attempt, exc) from None
            except openai.APIConnectionError as exc:
                reason, retry_after = _connection_reason(exc), None
                if attempt > self.retry.retries:
                    raise self._gave_up(reason, attempt, exc) from None
            else:
                return _reply(response, time.monotonic() - start, attempt)
            delay = self.retry.delay(attempt, retry_after)
            if self.on_retry:
                self.on_retry(reason, delay)
            self.sleep(delay)

    def _status_error(self, exc: openai.APIStatusError) -> EndpointError:
        message = _server_message(exc)
        if exc.status_code == 404 and ("model" in message.lower() or _error_code(exc) == "model_not_found"):
            return EndpointError(
                f"{self.endpoint}: unknown model {self.model!r} ({message}); "
                "check --model against the endpoint's GET /models list"
            )
        if exc.status_code == 404:
            return EndpointError(
                f"{self.endpoint}: no chat-completions route here (HTTP 404: {message}); "
                "check --base-url (OpenAI-compatible servers usually end in /v1)"
            )
        if exc.status_code in (401, 403):
            return EndpointError(
                f"{self.endpoint}: the API key was rejected (HTTP {exc.status_code}: {message}); "
                "set the variable named by --api-key-env (default OPENAI_API_KEY)"
            )
        return EndpointError(f"{self.endpoint}: request refused (HTTP {exc.status_code}: {message})")

    def _gave_up(self, reason: str, attempts: int, exc: Exception) -> EndpointError:
        if isinstance(exc, openai.APIConnectionError):
            return EndpointError(
                f"cannot reach {self.endpoint} ({reason}) after {attempts} attempt(s); "
                "check --base-url / OPENAI_BASE_URL and that the server is running"
            )
        if isinstance(exc, openai.RateLimitError):
            return EndpointError(
                f"{self.endpoint}: still rate-limited (HTTP 429) after {attempts} attempt(s); "
                "lower --parallel or raise --max-retries"
            )
        return EndpointError(f"{self.endpoint}: {reason} after {attempts} attempt(s): {_server_message(exc)}")


def _reply(response, latency_s: float, attempts: int) -> ChatReply:
    choice = response.choices[0] if response.choices else None
    usage = response.usage
    counts = {
        "prompt_tokens": getattr(usage, "prompt_tokens", 0) or 0,
        "completion_tokens": getattr(usage, "completion_tokens", 0) or 0,
        "total_tokens": getattr(usage, "total_tokens", 0) or 0,
    }
    return ChatReply(
        # Reasoning models may answer with empty content; that is a reply with no code, not a crash.
        text=(choice.message.content if choice and choice.message else None) or "",
        usage=counts,
        model=response.model or "",
        finish_reason=choice.finish_reason if choice else None,
        latency_s=latency_s,
        attempts=attempts,
    )


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare for APIs; our own backoff is fine then


def _connection_reason(exc: openai.APIConnectionError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    cause = exc.__cause__
    return f"connection failed: {cause}" if cause else "connection failed"


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return exc.message


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return error.get("code") if isinstance(error, dict) else None
