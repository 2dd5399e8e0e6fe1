"""A scripted model for plumbing tests (not a real model): replies come from a list, in order.

A reply is a text, or a dict of tool calls ({"tool_calls": [{"name": ..., "args": {...}}]}).
It goes through the same cassette layer as the real backends, so run tables see its calls.
"""

from google.adk.models.base_llm import BaseLlm
from google.adk.models.registry import LLMRegistry

from workbook.cassettes import cassettes, normalize_request
from workbook.models import reply_to_llm_response

SCRIPTS: dict[str, list[str | dict]] = {}


class ScriptedLlm(BaseLlm):
    @classmethod
    def supported_models(cls):
        return [r"scripted/.+"]

    async def generate_content_async(self, llm_request, stream=False):
        request = normalize_request(self.model, llm_request)

        async def live(seed):
            reply = SCRIPTS[self.model].pop(0) if SCRIPTS[self.model] else "(script exhausted)"
            return {
                **({"text": reply} if isinstance(reply, str) else {"text": "", **reply}),
                "finish_reason": "STOP",
                "latency_s": 0.01,
                "usage": {"prompt_tokens": 10, "output_tokens": 5, "thinking_tokens": 0},
            }

        reply = await cassettes().call(request, live)
        yield reply_to_llm_response(reply)


LLMRegistry.register(ScriptedLlm)
