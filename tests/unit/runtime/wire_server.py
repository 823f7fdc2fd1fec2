"""A local model API server for provider tests: any path, any body, SSE with names.

Pattern: a fake at the wire, not at the SDK: a real HTTP server on a free
         loopback port answering ``POST <path>`` from a queue of scripted
         answers (JSON, raw bytes of any content type, an SSE stream whose
         events carry ``event:`` names as the Responses and Messages APIs
         send them).
Role:    test helper for ``openai_responses``, ``anthropic_messages`` and the
         unparsable-reply tests of every provider; the fixture starts one per
         test and stops it in teardown.
Emits:   nothing; records every request body in ``requests``.

Why a second server beside ``chat_server.py``: that one speaks Chat
Completions only (one path, nameless SSE ending in ``[DONE]``); the newer
APIs name their events and end without a sentinel.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass(frozen=True)
class Json:
    """Answer with one JSON body and a status."""

    body: Any
    status: int = 200


@dataclasses.dataclass(frozen=True)
class Raw:
    """Answer with bytes of any content type (an HTML page, broken JSON)."""

    body: bytes
    content_type: str = "text/html"
    status: int = 200


@dataclasses.dataclass(frozen=True)
class Sse:
    """Answer with ``text/event-stream``: ``(event name or None, data)`` pairs."""

    events: list[tuple[str | None, Any]]
    done: bool = False  # Chat Completions ends with ``data: [DONE]``


Answer = Json | Raw | Sse


def named(*bodies: dict[str, Any]) -> Sse:
    """An SSE stream whose events are named for their ``type`` field."""
    return Sse([(str(b["type"]), b) for b in bodies])


class WireServer:
    """A model API on a free loopback port, in a thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="wire-server",
            daemon=True,
        )

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>`` (Anthropic's SDK adds ``/v1`` itself)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, *answers: Answer) -> None:
        """Queue answers, one per request, in order."""
        with self._lock:
            self._answers.extend(answers)

    def start(self) -> None:
        """Start serving."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _next(self) -> Answer:
        with self._lock:
            if not self._answers:
                return Json({"error": {"message": "no answer queued"}}, status=599)
            return self._answers.popleft()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.paths.append(self.path)
                answer = server._next()
                if isinstance(answer, Json):
                    self._send(answer.status, "application/json", answer.body)
                elif isinstance(answer, Raw):
                    self._send_bytes(answer.status, answer.content_type, answer.body)
                else:
                    self._send_sse(answer)

            def _send(self, status: int, content_type: str, body: Any) -> None:
                self._send_bytes(status, content_type, json.dumps(body).encode())

            def _send_bytes(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_sse(self, answer: Sse) -> None:
                # HTTP/1.0 framing: the body ends when the connection closes.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for name, data in answer.events:
                    text = data if isinstance(data, str) else json.dumps(data)
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {text}\n\n".encode())
                    self.wfile.flush()
                if answer.done:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()

        return Handler


def serving() -> Iterator[WireServer]:
    """A started server, stopped when the generator closes (a fixture body)."""
    server = WireServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
