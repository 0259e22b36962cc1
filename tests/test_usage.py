"""Usage normalization (design §2): provider payloads -> one shape; parts never added twice."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest

from budgetlens.usage import Usage, UsageAccumulator, normalize_usage

# (case id, payload, provider hint, expected (input, output, cache_read, cache_write, reasoning))
CASES = [
    # OpenAI Chat Completions (platform docs: prompt_tokens includes cached_tokens; completion
    # includes reasoning_tokens).
    (
        "openai_chat_cached_reasoning",
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 256,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        None,
        (2006, 300, 1920, 0, 256),
    ),
    (
        "openai_chat_no_details",
        {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29},
        None,
        (19, 10, 0, 0, 0),
    ),
    (
        "openai_chat_zero",
        {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        None,
        (0, 0, 0, 0, 0),
    ),
    # OpenAI Responses API (input_tokens includes cached; output includes reasoning).
    (
        "openai_responses_cached_reasoning",
        {
            "input_tokens": 328,
            "input_tokens_details": {"cached_tokens": 128},
            "output_tokens": 52,
            "output_tokens_details": {"reasoning_tokens": 32},
            "total_tokens": 380,
        },
        "openai",
        (328, 52, 128, 0, 32),
    ),
    # Real: mini-swe-agent / LiteLLM / DeepSeek (realdata §2): prompt includes the cache hit.
    (
        "litellm_deepseek_chat",
        {
            "completion_tokens": 89,
            "prompt_tokens": 2182,
            "total_tokens": 2271,
            "completion_tokens_details": None,
            "prompt_tokens_details": {"cached_tokens": 320},
            "prompt_cache_hit_tokens": 320,
            "prompt_cache_miss_tokens": 1862,
        },
        None,
        (2182, 89, 320, 0, 0),
    ),
    (
        "litellm_deepseek_reasoner",
        {
            "completion_tokens": 91,
            "prompt_tokens": 2036,
            "total_tokens": 2127,
            "completion_tokens_details": {"reasoning_tokens": 32},
            "prompt_tokens_details": {"cached_tokens": 896},
            "prompt_cache_hit_tokens": 896,
            "prompt_cache_miss_tokens": 1140,
        },
        None,
        (2036, 91, 896, 0, 32),
    ),
    # Real: OpenHands runtime traj via LiteLLM for Claude: prompt_tokens includes cache creation.
    (
        "litellm_anthropic_cache_write",
        {
            "completion_tokens": 1135,
            "prompt_tokens": 3486,
            "total_tokens": 4621,
            "completion_tokens_details": None,
            "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0},
            "cache_creation_input_tokens": 3482,
            "cache_read_input_tokens": 0,
        },
        None,
        (3486, 1135, 0, 3482, 0),
    ),
    # LiteLLM dict from a source whose prompt excludes the cache buckets: parts > total -> added.
    (
        "litellm_prompt_without_cache",
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "cache_read_input_tokens": 400,
            "cache_creation_input_tokens": 100,
        },
        None,
        (510, 5, 400, 100, 0),
    ),
    # Anthropic Messages (docs + realdata claude-code-jsonl): input excludes the cache buckets.
    (
        "anthropic_claude_code_cache",
        {
            "input_tokens": 3,
            "cache_creation_input_tokens": 15005,
            "cache_read_input_tokens": 11442,
            "cache_creation": {"ephemeral_5m_input_tokens": 15005, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 9,
            "service_tier": "standard",
            "inference_geo": "global",
        },
        None,
        (26450, 9, 11442, 15005, 0),
    ),
    ("anthropic_no_cache_hint", {"input_tokens": 25, "output_tokens": 7}, "anthropic", (25, 7, 0, 0, 0)),
    (
        "anthropic_null_cache_fields",
        {
            "input_tokens": 12,
            "output_tokens": 3,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": None,
        },
        None,
        (12, 3, 0, 0, 0),
    ),
    # Bedrock Converse (AWS docs): inputTokens excludes cacheRead/cacheWrite.
    (
        "bedrock_converse_cache",
        {
            "inputTokens": 120,
            "outputTokens": 80,
            "totalTokens": 1700,
            "cacheReadInputTokens": 1000,
            "cacheWriteInputTokens": 500,
        },
        "aws.bedrock",
        (1620, 80, 1000, 500, 0),
    ),
    (
        "bedrock_converse_plain",
        {"inputTokens": 30, "outputTokens": 628, "totalTokens": 658},
        None,
        (30, 628, 0, 0, 0),
    ),
    # Gemini usageMetadata (API docs): thoughts outside candidates, tool-use prompt outside prompt,
    # prompt includes cachedContent.
    (
        "gemini_thoughts_tool_cache",
        {
            "promptTokenCount": 1200,
            "candidatesTokenCount": 150,
            "thoughtsTokenCount": 900,
            "toolUsePromptTokenCount": 40,
            "cachedContentTokenCount": 1000,
            "totalTokenCount": 2290,
        },
        None,
        (1240, 1050, 1000, 0, 900),
    ),
    (
        "gemini_snake_case_sdk",
        {"prompt_token_count": 8, "candidates_token_count": 12, "total_token_count": 20},
        None,
        (8, 12, 0, 0, 0),
    ),
    ("gemini_missing_candidates", {"promptTokenCount": 5, "totalTokenCount": 5}, None, (5, 0, 0, 0, 0)),
    # Real: Codex CLI token_count (realdata §4): cached included in input, reasoning in output.
    (
        "codex_token_count",
        {
            "input_tokens": 17203,
            "cached_input_tokens": 3456,
            "output_tokens": 358,
            "reasoning_output_tokens": 193,
            "total_tokens": 17561,
        },
        None,
        (17203, 358, 3456, 0, 193),
    ),
    # Real: OpenHands metrics.token_usages (realdata §5).
    (
        "openhands_token_usage",
        {
            "model": "openai/openrouter-llama-4-maverick",
            "prompt_tokens": 5920,
            "completion_tokens": 128,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "response_id": "gen-1",
        },
        None,
        (5920, 128, 0, 0, 0),
    ),
    # Real: Langfuse usageDetails (realdata §8): total tells whether details are exclusive.
    (
        "langfuse_exclusive_reasoning",
        {
            "input": 179,
            "output": 35,
            "total": 278,
            "input_audio": 0,
            "input_cache_read": 0,
            "output_audio": 0,
            "output_reasoning": 64,
        },
        None,
        (179, 99, 0, 0, 64),
    ),
    (
        "langfuse_included_reasoning",
        {"total": 2061, "input": 6, "completion_details.reasoning": 1104, "output": 2055},
        None,
        (6, 2055, 0, 0, 1104),
    ),
    ("langfuse_partial_no_output", {"input": 1988, "total": 1988}, None, (1988, 0, 0, 0, 0)),
]


@pytest.mark.parametrize("payload, provider, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_provider_payload_normalizes_to_expected_usage(payload, provider, expected):
    usage = normalize_usage(payload, provider)
    got = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
    )
    assert got == expected


@pytest.mark.parametrize(
    "payload",
    [None, {}, {"usage": None}, {"id": "chatcmpl-1", "choices": []}, {"model": "gpt-4o"}],
    ids=["none", "empty", "usage_null", "chunk_without_usage", "no_usage_keys"],
)
def test_payload_without_usage_is_unknown_not_zero(payload):
    assert normalize_usage(payload) is None


def test_whole_response_dict_and_sdk_object_are_unwrapped():
    response = {
        "id": "msg_1",
        "type": "message",
        "content": [{"type": "text", "text": "x"}],
        "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 5},
    }
    assert normalize_usage(response) == Usage(15, 2, 5, 0, 0)
    obj = SimpleNamespace(usage=SimpleNamespace(prompt_tokens=7, completion_tokens=3))
    assert normalize_usage(obj) == Usage(7, 3)


def test_responses_api_response_with_output_list_reads_its_usage():
    response = {
        "id": "resp_1",
        "output": [{"type": "message"}],
        "usage": {"input_tokens": 20, "output_tokens": 4, "total_tokens": 24},
    }
    assert normalize_usage(response, "openai") == Usage(20, 4)


def test_total_tokens_is_input_plus_output_without_parts_added_again():
    usage = Usage(
        input_tokens=1000,
        output_tokens=200,
        cache_read_tokens=800,
        cache_write_tokens=100,
        reasoning_tokens=150,
    )
    assert usage.total_tokens == 1200


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"input_tokens": -1}, "input_tokens"),
        ({"output_tokens": 1.5}, "output_tokens"),
        ({"input_tokens": 5, "cache_read_tokens": 6}, "cache_read_tokens"),
        ({"output_tokens": 1, "reasoning_tokens": 2}, "reasoning_tokens"),
    ],
)
def test_invalid_usage_is_rejected_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Usage(**kwargs)


def test_negative_count_in_payload_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match="completion_tokens"):
        normalize_usage({"prompt_tokens": 3, "completion_tokens": -2})


def test_anthropic_stream_is_cumulative_not_summed():
    acc = UsageAccumulator()
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "usage": {
                    "input_tokens": 25,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 0,
                    "output_tokens": 1,
                },
            },
        },
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 15}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ]
    for event in events:
        acc.add(event)
    assert acc.usage == Usage(125, 40, 100, 0, 0)


def test_openai_stream_usage_comes_from_last_chunk_only():
    acc = UsageAccumulator("openai")
    for _ in range(3):
        acc.add({"id": "c", "choices": [{"delta": {"content": "x"}}], "usage": None})
    assert acc.usage is None
    acc.add(
        {
            "id": "c",
            "choices": [],
            "usage": {
                "prompt_tokens": 50,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 10},
            },
        }
    )
    assert acc.usage == Usage(50, 3, 10, 0, 0)


def test_gemini_stream_keeps_latest_cumulative_metadata():
    acc = UsageAccumulator()
    acc.add({"candidates": [], "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2}})
    acc.add(
        {
            "candidates": [],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 7, "thoughtsTokenCount": 4},
        }
    )
    assert acc.usage == Usage(9, 11, 0, 0, 4)


def test_real_deepseek_calls_normalize_with_cache_inside_prompt(realdata):
    path = realdata / "mini-swe-agent-deepseek" / "all_runs_usage_projection.jsonl.gz"
    checked = 0
    with gzip.open(path, "rt") as fh:
        for line in fh:
            for call in json.loads(line)["calls"]:
                raw = call["usage"]
                if not raw:
                    continue
                usage = normalize_usage(raw)
                assert usage.input_tokens == raw["prompt_tokens"]
                assert usage.total_tokens == raw["total_tokens"]
                checked += 1
            if checked > 2000:
                break
    assert checked > 2000


@pytest.mark.parametrize(
    "payload",
    [
        {"prompt_tokens": None, "completion_tokens": None},
        {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
        {"input_tokens": None, "output_tokens": None},
        {"input_tokens": None, "output_tokens": None, "cache_read_input_tokens": None},
        {"input": None, "output": None},
        {"promptTokenCount": None, "candidatesTokenCount": None},
        {"inputTokens": None, "outputTokens": None},
        {"usage": {"prompt_tokens": None, "completion_tokens": None}},
    ],
    ids=["chat", "chat_total", "responses", "anthropic", "langfuse", "gemini", "bedrock", "wrapped"],
)
def test_usage_whose_counts_are_all_null_is_unknown_not_zero(payload):
    assert normalize_usage(payload) is None


def test_usage_with_one_null_count_keeps_the_reported_one():
    assert normalize_usage({"prompt_tokens": 12, "completion_tokens": None}) == Usage(12, 0)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1e400])
def test_non_finite_count_is_rejected_naming_the_field(value):
    with pytest.raises(ValueError, match="prompt_tokens"):
        normalize_usage({"prompt_tokens": value, "completion_tokens": 1})


RESPONSES_COMPLETED = {
    "type": "response.completed",
    "sequence_number": 12,
    "response": {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [],
        "usage": {
            "input_tokens": 120,
            "input_tokens_details": {"cached_tokens": 64},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 16},
            "total_tokens": 160,
        },
    },
}


def test_openai_responses_stream_usage_comes_from_the_completed_event():
    acc = UsageAccumulator()
    acc.add(
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {"id": "resp_1", "object": "response", "status": "in_progress", "usage": None},
        }
    )
    acc.add({"type": "response.output_text.delta", "sequence_number": 5, "delta": "Hi"})
    assert acc.usage is None
    acc.add(RESPONSES_COMPLETED)
    assert acc.usage == Usage(120, 40, 64, 0, 16)


def test_openai_responses_completed_event_normalizes_directly():
    assert normalize_usage(RESPONSES_COMPLETED) == Usage(120, 40, 64, 0, 16)
