"""A scripted model on loopback: an OpenAI-compatible ``/v1/chat/completions`` server.

Each rollout gets the next policy of ``policies``, in the order their first requests arrive
(``sessions`` maps each rollout's trace id to its index). ``solve``: the first turn
calls the ``bash`` tool with the quickstart's fix (examples/quickstart/agent/fix.sh), the next
answers ``done``. ``idle``: answers at once, no tool call. ``fail``: answers HTTP 400, so the
harness fails. Streamed requests get server-sent events, others one JSON body. Every request and
every tool result the harness sent back is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
FIX = (REPO / "examples" / "quickstart" / "agent" / "fix.sh").read_text()


def reply(policy: str, conversation: int, request: dict[str, Any]) -> dict[str, Any]:
    """The scripted assistant message for ``request``."""
    messages = request.get("messages", [])
    tools = [t.get("function", {}).get("name") for t in request.get("tools") or []]
    called = any(m.get("role") == "tool" for m in messages)
    if policy == "solve" and not called and "bash" in tools:
        call = {
            "id": f"call_{conversation}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": FIX})},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": "done" if called else "nothing to do"}


class ScriptedModel:
    """The server; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, policies: list[str]) -> None:
        self.policies = policies
        self.requests: list[dict[str, Any]] = []
        self.tool_results: list[str] = []
        self.sessions: dict[str, int] = {}
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                policy, conversation = model.assign(self.headers.get("X-Session-ID", ""), body)
                if policy == "fail":
                    error = {"error": {"message": "scripted failure", "type": "invalid_request"}}
                    data = json.dumps(error).encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                for m in body.get("messages", []):
                    if m.get("role") == "tool":
                        content = m.get("content")
                        model.tool_results.append(
                            content if isinstance(content, str) else json.dumps(content)
                        )
                message = reply(policy, conversation, body)
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                base = {
                    "id": f"chatcmpl-{len(model.requests)}",
                    "created": int(time.time()),
                    "model": body.get("model", ""),
                }
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                if body.get("stream"):
                    self.stream(base, message, finish, usage)
                    return
                answer = {
                    **base,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def stream(
                self, base: dict[str, Any], message: dict[str, Any], finish: str, usage: Any
            ) -> None:
                delta: dict[str, Any] = {"role": "assistant"}
                if message.get("content") is not None:
                    delta["content"] = message["content"]
                if message.get("tool_calls"):
                    delta["tool_calls"] = [
                        {"index": i, **call} for i, call in enumerate(message["tool_calls"])
                    ]
                chunks = [
                    {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                    {"choices": [], "usage": usage},
                ]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    event = {**base, "object": "chat.completion.chunk", **chunk}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def assign(self, session: str, body: dict[str, Any]) -> tuple[str, int]:
        """Records ``body`` and says which policy and conversation it belongs to.

        verifiers' interception server names the rollout (its trace id) in ``X-Session-ID``.
        """
        with self._lock:
            self.requests.append(body)
            if session not in self.sessions:
                self.sessions[session] = len(self.sessions)
            conversation = self.sessions[session]
        return self.policies[conversation % len(self.policies)], conversation

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
