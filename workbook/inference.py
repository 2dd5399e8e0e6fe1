"""Eval step one (notebook 02): the agent answers every case, through ADK's LocalEvalService.

Frozen answers (notebook 04) skip this step: they become inference results as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.adk.agents import LlmAgent
    from google.adk.evaluation.base_eval_service import InferenceResult
    from google.adk.evaluation.eval_set import EvalSet
    from google.adk.evaluation.eval_set_results_manager import EvalSetResultsManager
    from google.adk.evaluation.local_eval_service import LocalEvalService

import asyncio

from google.genai import types

from workbook.agent import APP_NAME
from workbook.cassettes import tag_calls
from workbook.util import progress


def eval_service(
    agent: LlmAgent | None, evalset: EvalSet, results: EvalSetResultsManager | None = None
) -> LocalEvalService:
    """Return ADK's LocalEvalService for an agent (None: judging only) over an in-memory evalset.

    `results`, when given, receives every EvalCaseResult the service makes (ADK's own hook).
    """
    from google.adk.evaluation.in_memory_eval_sets_manager import InMemoryEvalSetsManager
    from google.adk.evaluation.local_eval_service import LocalEvalService

    manager = InMemoryEvalSetsManager()
    manager.create_eval_set(APP_NAME, evalset.eval_set_id)
    for case in evalset.eval_cases:
        manager.add_eval_case(APP_NAME, evalset.eval_set_id, case)
    return LocalEvalService(root_agent=agent, eval_sets_manager=manager, eval_set_results_manager=results)


async def agent_inferences(
    service: LocalEvalService, evalset: EvalSet, repeats: int, parallelism: int, case_ids: list[str] | None
) -> list[tuple[int, InferenceResult]]:
    """Return (repeat, ADK InferenceResult) for every case (or those in `case_ids`), `repeats` times.

    Up to `parallelism` cases run at once; each call is tagged phase 'agent' with its case and repeat.
    """
    from google.adk.evaluation.base_eval_service import InferenceConfig, InferenceRequest

    cases = [case for case in evalset.eval_cases if not case_ids or case.eval_id in case_ids]
    limit = asyncio.Semaphore(parallelism)
    bar = progress(total=repeats * len(cases), desc=f"{evalset.eval_set_id}: agent answers")

    async def answer(case, repeat: int):
        async with limit:
            tag_calls(phase="agent", case=case.eval_id, repeat=repeat)
            request = InferenceRequest(
                app_name=APP_NAME,
                eval_set_id=evalset.eval_set_id,
                eval_case_ids=[case.eval_id],
                inference_config=InferenceConfig(parallelism=1),
            )
            inference = [result async for result in service.perform_inference(request)][0]
            bar.update(1)
            return repeat, inference

    try:
        return await asyncio.gather(*(answer(case, repeat) for repeat in range(repeats) for case in cases))
    finally:
        bar.close()


def frozen_inference(evalset: EvalSet, row: Any) -> InferenceResult:
    """Return an ADK InferenceResult holding one frozen answer (a row with case, user, answer).

    A row with an `instruction` text carries it as the agent's instructions, which the rubric judge
    reads as <developer_instructions> (as it would for a live agent).
    """
    from google.adk.evaluation.app_details import AgentDetails, AppDetails
    from google.adk.evaluation.base_eval_service import InferenceResult, InferenceStatus
    from google.adk.evaluation.eval_case import Invocation

    instruction = getattr(row, "instruction", None)
    invocation = Invocation(
        user_content=types.Content(role="user", parts=[types.Part(text=row.user)]),
        final_response=types.Content(role="model", parts=[types.Part(text=str(row.answer))]),
        app_details=AppDetails(agent_details={APP_NAME: AgentDetails(name=APP_NAME, instructions=instruction)})
        if isinstance(instruction, str)
        else None,
    )
    return InferenceResult(
        app_name=APP_NAME,
        eval_set_id=evalset.eval_set_id,
        eval_case_id=row.case,
        inferences=[invocation],
        session_id=f"frozen-{row.case}",
        status=InferenceStatus.SUCCESS,
    )
