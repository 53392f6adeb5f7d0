"""A tiny OpenAI-compatible chat server on 127.0.0.1 that replays recorded answers, for real-HTTP tests.

Answers are scripted per problem: the first user message of a request contains the problem's source, so
`answers = {marker: [turn 1 answer, turn 2 answer, ...]}` picks the list whose marker it contains and the
entry for the request's turn (the number of assistant messages so far). Replies are therefore the same
whatever order parallel samples arrive in. `failures` are served first, one per request (429, 500, ...).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

MODEL = "replay-model"
PROMPT_TOKENS = 100
COMPLETION_TOKENS = 10


class ReplayServer:
    model = MODEL

    def __init__(self) -> None:
        self.answers: dict[str, list[str]] = {}
        self.failures: list[tuple[int, dict[str, str]]] = []   # (status, headers), served before answers
        self.requests: list[dict] = []
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> ReplayServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def requests_for(self, marker: str) -> list[dict]:
        return [r for r in self.requests if marker in r["messages"][0]["content"]]

    def _reply(self, body: dict) -> tuple[int, dict, dict[str, str]]:
        with self._lock:
            self.requests.append(body)
            if self.failures:
                status, headers = self.failures.pop(0)
                error = {"message": f"scripted failure {status}", "type": "server_error"}
                return status, {"error": error}, headers
        if body.get("model") != MODEL:
            error = {"message": f"The model `{body.get('model')}` does not exist",
                     "type": "invalid_request_error", "code": "model_not_found"}
            return 404, {"error": error}, {}
        prompt = body["messages"][0]["content"]
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        script = next((answers for marker, answers in self.answers.items() if marker in prompt), None)
        text = "I have no answer for this problem." if script is None else script[min(turn, len(script) - 1)]
        completion = {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            ],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                      "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
        }
        return 200, completion, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.authorizations.append(self.headers.get("Authorization", ""))
                if self.path != "/v1/chat/completions":
                    status, payload, headers = 404, {"error": {"message": "no such route"}}, {}
                else:
                    status, payload, headers = server._reply(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # keep test output clean
                pass

        return Handler


@pytest.fixture
def replay_server() -> Iterator[ReplayServer]:
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"

