"""A local stand-in for the OpenAI and Anthropic HTTP APIs, for the adapter examples and tests.

It answers ``POST /v1/chat/completions``, ``/v1/responses`` and ``/v1/messages`` with bodies of
the providers' recorded shapes (plain JSON, or server-sent events when ``stream`` is true),
usage included. The first call of a conversation that offers tools asks for a tool call; once a
tool result is in the conversation it answers with text. A model named ``error-429`` or
``error-500`` gets that HTTP error; ``drop-stream`` gets a stream cut before its usage.
No network: it listens on 127.0.0.1 on a free port, in a daemon thread.

    with LLMServer() as server:
        client = OpenAI(base_url=server.openai_url, api_key="test")
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Usage the server reports per call (tokens): input, cached input, output, reasoning.
INPUT_TOKENS, CACHED_TOKENS, OUTPUT_TOKENS, REASONING_TOKENS = 1_200, 1_024, 300, 64


def _has_tool_result(body: dict[str, Any]) -> bool:
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return True
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(i, dict) and i.get("type") == "function_call_output" for i in items
    )


def _tool_name(body: dict[str, Any]) -> str | None:
    tools = body.get("tools") or []
    if not tools or _has_tool_result(body):
        return None
    tool = tools[0]
    return tool.get("name") or (tool.get("function") or {}).get("name")


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    tool = _tool_name(body)
    message: dict[str, Any] = {"role": "assistant", "content": None if tool else "Done.", "refusal": None}
    if tool:
        message["tool_calls"] = [
            {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": '{"path": "a.py"}'}}
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": body["model"] + "-2025-01-01",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": INPUT_TOKENS,
            "completion_tokens": OUTPUT_TOKENS,
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
            "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": REASONING_TOKENS, "audio_tokens": 0},
        },
    }


def _chat_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    full = _chat(body)
    base = {k: full[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        base
        | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": word}, "finish_reason": None}]}
        for word in ("Do", "ne.")
    ]
    chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(base | {"choices": [], "usage": full["usage"]})
    return chunks


def _responses(body: dict[str, Any]) -> dict[str, Any]:
    tool = _tool_name(body)
    if tool:
        output: list[dict[str, Any]] = [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": tool,
                "arguments": '{"path": "a.py"}',
                "status": "completed",
            }
        ]
    else:
        output = [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
            }
        ]
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_764_000_000,
        "status": "completed",
        "model": body["model"] + "-2025-01-01",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
            "output_tokens": OUTPUT_TOKENS,
            "output_tokens_details": {"reasoning_tokens": REASONING_TOKENS},
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        },
    }


def _responses_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    full = _responses(body)
    started = full | {"status": "in_progress", "output": [], "usage": None}
    item = full["output"][0]
    if item["type"] != "message":  # a function call: added, then done
        steps: list[dict[str, Any]] = [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": item | {"status": "in_progress"},
            },
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
    else:
        part = {"type": "output_text", "text": "", "annotations": []}
        at = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        steps = [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": item | {"status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **at, "part": part},
            {"type": "response.output_text.delta", **at, "delta": "Done.", "logprobs": []},
            {"type": "response.output_text.done", **at, "text": "Done.", "logprobs": []},
            {"type": "response.content_part.done", **at, "part": part | {"text": "Done."}},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
    events = [
        {"type": "response.created", "response": started},
        *steps,
        {"type": "response.completed", "response": full},
    ]
    return [event | {"sequence_number": n} for n, event in enumerate(events)]


def _messages(body: dict[str, Any]) -> dict[str, Any]:
    tool = _tool_name(body)
    content: list[dict[str, Any]] = (
        [{"type": "tool_use", "id": "toolu_1", "name": tool, "input": {"path": "a.py"}}]
        if tool
        else [{"type": "text", "text": "Done."}]
    )
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": INPUT_TOKENS - CACHED_TOKENS,  # Anthropic: input without cache buckets
            "cache_read_input_tokens": CACHED_TOKENS,
            "cache_creation_input_tokens": 0,
            "output_tokens": OUTPUT_TOKENS,
        },
    }


def _messages_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    full = _messages(body)
    start = full | {"content": [], "stop_reason": None, "usage": full["usage"] | {"output_tokens": 1}}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Done."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": OUTPUT_TOKENS},
        },
        {"type": "message_stop"},
    ]


_ROUTES = {
    "/v1/chat/completions": (_chat, _chat_chunks, False),
    "/v1/responses": (_responses, _responses_events, True),
    "/v1/messages": (_messages, _messages_events, True),
}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.requests.append((self.path, body))
        route = _ROUTES.get(self.path)
        if route is None:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        model = str(body.get("model", ""))
        if model.startswith("error-"):
            status = int(model.split("-")[1])
            self._send(
                status, {"type": "error", "error": {"type": "api_error", "message": f"test error {status}"}}
            )
            return
        plain, streamed, named_events = route
        if not body.get("stream"):
            self._send(200, plain(body))
            return
        events = streamed(body)
        if model == "drop-stream":
            events = events[:2]  # cut before any usage
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            head = f"event: {event['type']}\n" if named_events else ""
            self.wfile.write(f"{head}data: {json.dumps(event)}\n\n".encode())
        if not named_events and model != "drop-stream":
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[tuple[str, dict[str, Any]]]


class LLMServer:
    """The server, started on enter (or :meth:`start`) and stopped on exit (:meth:`stop`).

    ``openai_url`` / ``anthropic_url``: base URLs for the clients; ``requests``: (path, body) of
    every request received, in order."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.requests = []
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        return self._server.requests

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def openai_url(self) -> str:
        return self.anthropic_url + "/v1"

    def start(self) -> LLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
