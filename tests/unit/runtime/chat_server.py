"""A local Chat Completions server for provider tests.

Pattern: a fake at the wire, not at the SDK: a real HTTP server on a free
         loopback port, answering ``POST /v1/chat/completions`` from a queue
         of scripted answers (JSON, SSE, an HTTP error, a stall).
Role:    test helper for ``openai_chat``; the fixture starts one per test
         and shuts it down in teardown.
Emits:   nothing; records every request body in ``requests``.

Why a real server rather than a mocked transport: the provider's promises are
about the wire (what JSON is sent, how SSE fragments assemble, how HTTP
failures translate), so the tests cross the same socket, HTTP parser and SSE
decoder a vLLM or Ollama server would.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Invariant: a stalled answer never outlives the test that asked for it.
_STALL_LIMIT_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class JsonAnswer:
    """Answer with one JSON body and a status."""

    body: dict[str, Any]
    status: int = 200


@dataclasses.dataclass(frozen=True)
class SseAnswer:
    """Answer with ``text/event-stream``: one event per chunk, then ``[DONE]``."""

    chunks: list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class StallAnswer:
    """Hold the request open until the server shuts down (a timeout test)."""


Answer = JsonAnswer | SseAnswer | StallAnswer


def completion(
    content: str | None = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
    prompt_tokens: int = 3,
    completion_tokens: int = 5,
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """One tool call as a non-streamed message carries it."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives the usage-only chunk."""
    choices: list[dict[str, Any]] = []
    if delta is not None:
        choices.append({"index": 0, "delta": delta, "finish_reason": finish_reason})
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "test-model",
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The final chunk ``stream_options.include_usage`` asks for."""
    return chunk(
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    )


class ChatServer:
    """A Chat Completions server on a free loopback port, in a thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll keeps shutdown() (one poll at most) out of test time.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="chat-server",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        """The API root to hand the provider, ending in ``/v1``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def answer(self, *answers: Answer) -> None:
        """Queue answers, one per request, in order."""
        with self._lock:
            self._answers.extend(answers)

    def start(self) -> None:
        """Start serving."""
        self._thread.start()

    def stop(self) -> None:
        """Release stalled requests, stop serving and close the socket."""
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=_STALL_LIMIT_SECONDS)

    def _next_answer(self) -> Answer:
        with self._lock:
            if not self._answers:
                return JsonAnswer(
                    {"error": {"message": "the test queued no answer"}}, status=599
                )
            return self._answers.popleft()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(headers)
                if self.path != "/v1/chat/completions":
                    self._send_json(404, {"error": {"message": "no such path"}})
                    return
                answer = server._next_answer()
                if isinstance(answer, JsonAnswer):
                    self._send_json(answer.status, answer.body)
                elif isinstance(answer, SseAnswer):
                    self._send_sse(answer.chunks)
                else:
                    server._released.wait(_STALL_LIMIT_SECONDS)

            def _send_json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_sse(self, chunks: list[dict[str, Any]]) -> None:
                # HTTP/1.0 framing: the body ends when the connection closes.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for item in chunks:
                    self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler
