"""The ADK model classes: `local/...` (llama.cpp) and `gemini-*` (ADK's Gemini), both behind the cassettes.

Importing this module registers both classes with ADK's LLMRegistry, so an agent or a judge
given a model name gets the recorded class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.adk.models._capabilities import LlmCapabilities

import re
import time
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.google_llm import Gemini
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.models.registry import LLMRegistry
from google.genai import types

from workbook.cassettes import cassettes, normalize_request
from workbook.judge_formats import format_key
from workbook.llama import local_generate
from workbook.settings import CredentialsError, settings
from workbook.util import shown_path


class LocalLlm(BaseLlm):
    """ADK model class for `local/...` names: llama.cpp in-process, behind record/replay."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"local/.+"]

    @property
    def capabilities(self) -> LlmCapabilities:
        from google.adk.models._capabilities import LlmCapabilities

        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        request = normalize_request(self.model, llm_request)
        request |= format_key(request)  # the judge format the workbook adds is part of the key
        reply = await cassettes().call(request, lambda seed: local_generate(request, seed))
        yield reply_to_llm_response(reply)


class RecordedGemini(Gemini):
    """ADK's own Gemini class, with credentials checked early and every call recorded."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"gemini-.*"]

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        current = settings()
        if current.gemini_base_url and not self.base_url:
            self.base_url = current.gemini_base_url

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        request = normalize_request(self.model, llm_request)

        async def live_call(seed: int) -> dict:
            _require_gemini_credentials(self.model)
            started = time.perf_counter()
            final = None
            async for response in super(RecordedGemini, self).generate_content_async(llm_request):
                final = response
            return _gemini_reply(final, time.perf_counter() - started)

        reply = await cassettes().call(request, live_call)
        yield reply_to_llm_response(reply)


LLMRegistry.register(LocalLlm)
LLMRegistry.register(RecordedGemini)


def describe_backend(model: str) -> str:
    """Return one line saying which backend answers `model` and how calls are recorded."""
    current = settings()
    kind = "llama.cpp on this CPU" if model.startswith("local/") else "Gemini API"
    return (
        f"{model} via {kind}; record mode {current.workbook_record_mode!r}, "
        f"cassettes in {shown_path(current.workbook_recordings)}"
    )


def supports_thinking(model: str) -> bool:
    """Return whether `model` has a thinking mode that a thinking budget changes (Gemini 2.5 and later;
    no local model here has one)."""
    return re.match(r"gemini-(2\.5|[3-9])", model) is not None


def reply_to_llm_response(reply: dict) -> LlmResponse:
    """Return the ADK LlmResponse for a cassette reply: its text, its tool calls as function-call parts,
    usage and replay metadata."""
    usage = reply["usage"]
    calls = [
        types.Part(function_call=types.FunctionCall(name=c["name"], args=c["args"]))
        for c in reply.get("tool_calls", [])
    ]
    text = [types.Part(text=reply["text"])] if reply["text"] or not calls else []
    return LlmResponse(
        content=types.Content(role="model", parts=text + calls),
        finish_reason=types.FinishReason(reply.get("finish_reason", "STOP")),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=usage["prompt_tokens"],
            candidates_token_count=usage["output_tokens"],
            thoughts_token_count=usage.get("thinking_tokens") or None,
            total_token_count=usage["prompt_tokens"] + usage["output_tokens"] + usage.get("thinking_tokens", 0),
        ),
        custom_metadata={key: reply.get(key) for key in ("replayed", "latency_s", "seed", "digest", "occurrence")},
        logprobs_result=_logprobs_result(reply["logprobs"]) if reply.get("logprobs") else None,
    )


def _logprobs_result(logprobs: dict) -> types.LogprobsResult:
    def candidate(pair: list) -> types.LogprobsResultCandidate:
        return types.LogprobsResultCandidate(token=pair[0], log_probability=pair[1])

    return types.LogprobsResult(
        chosen_candidates=[candidate(pair) for pair in logprobs["chosen"]],
        top_candidates=[
            types.LogprobsResultTopCandidates(candidates=[candidate(p) for p in top]) for top in logprobs["top"]
        ],
    )


def _reply_logprobs(result: types.LogprobsResult | None) -> dict:
    if not result or not result.chosen_candidates:
        return {}
    return {
        "logprobs": {
            "chosen": [[c.token, c.log_probability] for c in result.chosen_candidates],
            "top": [
                [[c.token, c.log_probability] for c in top.candidates or []] for top in result.top_candidates or []
            ],
        }
    }


def _gemini_reply(response: LlmResponse | None, latency: float) -> dict:
    parts = response.content.parts if response and response.content and response.content.parts else []
    usage = response.usage_metadata if response else None
    calls = [{"name": p.function_call.name, "args": p.function_call.args or {}} for p in parts if p.function_call]
    return {
        "text": "".join(part.text or "" for part in parts if not part.thought),
        **({"tool_calls": calls} if calls else {}),
        "finish_reason": response.finish_reason.name if response and response.finish_reason else "STOP",
        "usage": {
            "prompt_tokens": (usage.prompt_token_count or 0) if usage else 0,
            "output_tokens": (usage.candidates_token_count or 0) if usage else 0,
            "thinking_tokens": (usage.thoughts_token_count or 0) if usage else 0,
            "cached_prompt_tokens": (usage.cached_content_token_count or 0) if usage else 0,
        },
        "latency_s": round(latency, 3),
        **_reply_logprobs(response.logprobs_result if response else None),
    }


def _require_gemini_credentials(model: str) -> None:
    current = settings()
    if current.google_api_key or (current.google_genai_use_vertexai and current.google_cloud_project):
        return
    raise CredentialsError(
        f"{model} needs credentials: set GOOGLE_API_KEY in .env (see .env.example), or "
        "GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION. "
        "Offline, use a local model instead, e.g. model='local/qwen-1.5b'."
    )
