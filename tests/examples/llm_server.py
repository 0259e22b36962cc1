"""A local stand-in for the OpenAI and Anthropic HTTP APIs, for the adapter examples and tests.

It answers ``POST /v1/chat/completions``, ``/v1/responses`` and ``/v1/messages`` with bodies of
the providers' recorded shapes (plain JSON, or server-sent events when ``stream`` is true),
usage included. The first call of a conversation that offers tools asks for a tool call; once a
tool result is in the conversation it answers with text (JSON ``{"answer": "Done."}`` when the
request asks for structured output); a model named ``parallel-*`` is asked for 3 tool calls in one
response. A model named ``error-429`` or ``error-500`` gets that HTTP error; ``drop-stream`` gets a
stream cut before its usage; ``cut-stream`` an Anthropic stream cut after its content deltas,
before ``message_delta``. ``/v1/embeddings`` and legacy ``/v1/completions`` are answered too.
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


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def _has_tool_result(body: dict[str, Any]) -> bool:
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if message.get("role") == "user" and "Observation:" in _text(content):
            return True  # smolagents sends tool results as user text
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return True
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(i, dict) and i.get("type") == "function_call_output" for i in items
    )


def _name(tool: dict[str, Any]) -> str | None:
    return tool.get("name") or (tool.get("function") or {}).get("name")


def _tool_name(body: dict[str, Any]) -> str | None:
    tools = body.get("tools") or []
    if not tools:
        return None
    if _has_tool_result(body):  # a framework that ends through a tool gets it called
        return "final_answer" if any(_name(t) == "final_answer" for t in tools) else None
    return next((_name(t) for t in tools if _name(t) != "final_answer"), _name(tools[0]))


def _tool_count(body: dict[str, Any]) -> int:
    """Tool calls to ask for: 3 in parallel for a model named ``parallel-*``, else 1."""
    return 3 if str(body.get("model", "")).startswith("parallel") else 1


def _arguments(body: dict[str, Any]) -> dict[str, Any]:
    """Arguments for the tool called, from its JSON schema (its required properties when it
    names them: strings ``"a.py"``, numbers 1, objects {}, arrays [])."""
    tools = body.get("tools") or [{}]
    tool = next((t for t in tools if _name(t) == _tool_name(body)), tools[0])  # the one called
    schema = tool.get("parameters") or (tool.get("function") or {}).get("parameters")
    schema = schema or tool.get("input_schema") or {}
    props = schema.get("properties") or {"path": {"type": "string"}}
    if schema.get("required"):
        props = {k: v for k, v in props.items() if k in schema["required"]}
    kinds: dict[str, Any] = {"integer": 1, "number": 1, "boolean": True, "object": {}, "array": []}
    return {k: kinds.get(str(v.get("type")), "a.py") for k, v in props.items()}


def _structured(body: dict[str, Any]) -> bool:
    """Whether the request asks for JSON output (Chat ``response_format`` json_schema,
    Responses ``text.format``, Anthropic ``output_config.format``)."""
    chat = (body.get("response_format") or {}).get("type") == "json_schema"
    responses = ((body.get("text") or {}).get("format") or {}).get("type") == "json_schema"
    return chat or responses or bool((body.get("output_config") or {}).get("format"))


#: The JSON text answered to a structured-output request (a schema with one string ``answer``).
STRUCTURED_TEXT = '{"answer": "Done."}'


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    tool = _tool_name(body)
    text = STRUCTURED_TEXT if _structured(body) else "Done."
    message: dict[str, Any] = {"role": "assistant", "content": None if tool else text, "refusal": None}
    if tool:
        args = json.dumps(_arguments(body))
        message["tool_calls"] = [
            {"id": f"call_{n}", "type": "function", "function": {"name": tool, "arguments": args}}
            for n in range(1, _tool_count(body) + 1)
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
    message = full["choices"][0]["message"]
    if message.get("tool_calls"):
        deltas = [
            {"role": "assistant", "tool_calls": [call | {"index": i}]}
            for i, call in enumerate(message["tool_calls"])
        ]
    else:
        deltas = [{"role": "assistant", "content": word} for word in ("Do", "ne.")]
    chunks = [base | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    reason = full["choices"][0]["finish_reason"]
    chunks.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(base | {"choices": [], "usage": full["usage"]})
    return chunks


def _responses(body: dict[str, Any]) -> dict[str, Any]:
    tool = _tool_name(body)
    if tool:
        output: list[dict[str, Any]] = [
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": tool,
                "arguments": json.dumps(_arguments(body)),
                "status": "completed",
            }
            for n in range(1, _tool_count(body) + 1)
        ]
    else:
        text = STRUCTURED_TEXT if _structured(body) else "Done."
        output = [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
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
    if item["type"] != "message":  # function calls: each added, then done
        steps: list[dict[str, Any]] = []
        for i, call in enumerate(full["output"]):
            steps.append(
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item": call | {"status": "in_progress"},
                }
            )
            steps.append({"type": "response.output_item.done", "output_index": i, "item": call})
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
    text = STRUCTURED_TEXT if _structured(body) else "Done."
    content: list[dict[str, Any]] = (
        [
            {"type": "tool_use", "id": f"toolu_{n}", "name": tool, "input": _arguments(body)}
            for n in range(1, _tool_count(body) + 1)
        ]
        if tool
        else [{"type": "text", "text": text}]
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
    blocks: list[dict[str, Any]] = []
    for i, block in enumerate(full["content"]):
        if block["type"] == "tool_use":
            blocks += [
                {"type": "content_block_start", "index": i, "content_block": block | {"input": {}}},
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                },
            ]
        else:
            blocks += [
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "text_delta", "text": block["text"]},
                },
            ]
        blocks.append({"type": "content_block_stop", "index": i})
    return [
        {"type": "message_start", "message": start},
        *blocks,
        {
            "type": "message_delta",
            "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": OUTPUT_TOKENS},
        },
        {"type": "message_stop"},
    ]


def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
    texts = body.get("input")
    count = len(texts) if isinstance(texts, list) else 1
    return {
        "object": "list",
        "model": body["model"],
        "data": [{"object": "embedding", "index": i, "embedding": [0.1, 0.2]} for i in range(count)],
        "usage": {"prompt_tokens": INPUT_TOKENS, "total_tokens": INPUT_TOKENS},
    }


def _completions(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1_764_000_000,
        "model": body["model"],
        "choices": [{"index": 0, "text": "Done.", "logprobs": None, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": INPUT_TOKENS,
            "completion_tokens": OUTPUT_TOKENS,
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        },
    }


def _completions_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    full = _completions(body)
    base = {k: full[k] for k in ("id", "object", "created", "model")}
    chunks = [base | {"choices": [{"index": 0, "text": "Done.", "logprobs": None, "finish_reason": "stop"}]}]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(base | {"choices": [], "usage": full["usage"]})
    return chunks


_ROUTES = {
    "/v1/chat/completions": (_chat, _chat_chunks, False),
    "/v1/responses": (_responses, _responses_events, True),
    "/v1/messages": (_messages, _messages_events, True),
    "/v1/embeddings": (_embeddings, lambda body: [], False),
    "/v1/completions": (_completions, _completions_chunks, False),
}
#: Per streamed route: how many events a ``drop-stream`` model gets (cut before any usage) and a
#: ``cut-stream`` model gets (Anthropic: cut after content deltas, before ``message_delta``).
_CUT_AT = {"drop-stream": 2, "cut-stream": 3}


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
        self.server.beta_headers.append(self.headers.get("anthropic-beta"))
        route = _ROUTES.get(self.path.split("?")[0])  # Claude Code adds ?beta=true
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
        cut = model in _CUT_AT
        if cut:
            events = events[: _CUT_AT[model]]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            head = f"event: {event['type']}\n" if named_events else ""
            self.wfile.write(f"{head}data: {json.dumps(event)}\n\n".encode())
        if not named_events and not cut:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[tuple[str, dict[str, Any]]]
    beta_headers: list[str | None]


class LLMServer:
    """The server, started on enter (or :meth:`start`) and stopped on exit (:meth:`stop`).

    ``openai_url`` / ``anthropic_url``: base URLs for the clients; ``requests``: (path, body) of
    every request received, in order; ``beta_headers``: each one's ``anthropic-beta`` header (None: none)."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.requests = []
        self._server.beta_headers = []
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        return self._server.requests

    @property
    def beta_headers(self) -> list[str | None]:
        return self._server.beta_headers

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
