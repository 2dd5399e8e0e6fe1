"""Everything the workbook knows about ADK's LLM-judge prompts and replies, in one place.

ADK's judges (final_response_match_v2, the rubric metrics, hallucinations_v1) send fixed prompt
wording and parse the replies with their own regexes. This module recognises those prompts,
constrains a local model's reply to the exact layout ADK's parsers read, and parses a reply the
way ADK does, so the run table can keep every sample (ADK keeps only the winning one).
"""

from __future__ import annotations

import functools
import json
import math
import re
import string

from workbook.settings import settings


def last_prompt(request: dict) -> str:
    """Return the text of a normalized request's last turn: where ADK puts a judge prompt."""
    return request["contents"][-1]["text"] if request["contents"] else ""


def judge_kind(request: dict) -> str:
    """Return which ADK judge prompt a request is: 'reference', 'rubric', 'hallucination' or 'other'."""
    prompt = last_prompt(request)
    if '"is_the_agent_response_valid"' in prompt:
        return "reference"
    if "<properties>" in prompt and "Verdict:" in prompt:
        return "rubric"
    if "supporting_excerpt" in prompt or "<sentence>" in prompt:
        return "hallucination"
    return "other"


def judge_preamble(prompt: str) -> str:
    """Return the fixed start of an ADK judge prompt (its instructions and examples, up to its first
    case-specific field): what every call of that judge shares. '' for any other prompt."""
    if judge_kind({"contents": [{"text": prompt}]}) == "other":
        return ""
    return next((head for head in _judge_preambles() if prompt.startswith(head)), "")


@functools.cache
def _judge_preambles() -> tuple[str, ...]:
    # Read from ADK's own templates, so a new ADK wording is followed without edits here.
    from google.adk.evaluation import (
        final_response_match_v2,
        rubric_based_final_response_quality_v1,
        rubric_based_multi_turn_trajectory_evaluator,
        rubric_based_tool_use_quality_v1,
    )

    templates = (
        final_response_match_v2._FINAL_RESPONSE_MATCH_V2_PROMPT,
        rubric_based_final_response_quality_v1._RUBRIC_BASED_FINAL_RESPONSE_QUALITY_V1_PROMPT,
        rubric_based_tool_use_quality_v1._RUBRIC_BASED_TOOL_USE_QUALITY_V1_PROMPT,
        rubric_based_multi_turn_trajectory_evaluator._RUBRIC_BASED_MULTI_TURN_TRAJECTORY_QUALITY_V1_PROMPT,
    )
    heads = []
    for template in templates:
        fields = {name: "\0" for _, name, _, _ in string.Formatter().parse(template) if name}
        heads.append(template.format(**fields).split("\0", 1)[0])
    return tuple(heads)


# The one rubric prompt whose block layout the grammar below reproduces: final-response quality.
# The tool-use and multi-turn rubric prompts word their blocks differently, so they stay free.
_FINAL_RESPONSE_RUBRIC = "Verdict: [yes|no]"

# The JSON that final_response_match_v2 asks for, in the exact layout its regex reads (a plain JSON
# schema lets the model put whitespace before the colon, which ADK's parser then rejects).
REFERENCE_JUDGE_GRAMMAR = r"""root ::= "{\n  \"reasoning\": \"" reasoning "\",\n  \"is_the_agent_response_valid\": \"" label "\"\n}"
reasoning ::= ([^"\\\n] | "\\" ["\\/nt]){1,300}
label ::= "valid" | "invalid"
"""


# The versions of what this module adds to a local judge request (grammars, schemas, token limits).
# Add a version whenever judge_output_constraint's output changes: the version joins the cassette key,
# so old recordings never replay for a new format. "v1" is the format the committed recordings were
# made with, and it stays out of the key so their digests are unchanged. "v2" bounds the rubric
# blocks' Evidence and Rationale (final-response rubric prompts only; the reference format is v1's);
# its key names its bounds, since each bound is another grammar. WORKBOOK_JUDGE_FORMAT picks one
# (default v1, so the committed recordings replay).
_UNKEYED_VERSION = "v1"
_V2_PROPERTY_WORDS = 6  # v2 restates a property's first words only: ADK matches a block by its ID line


def judge_format_version() -> str:
    """Return the judge format now in force as it joins a cassette key: 'v1', or 'v2-e<evidence
    chars>-r<rationale chars>' (WORKBOOK_JUDGE_FORMAT, WORKBOOK_JUDGE_EVIDENCE_CHARS, ..._RATIONALE_CHARS)."""
    current = settings()
    if current.workbook_judge_format == "v1":
        return "v1"
    return f"v2-e{current.workbook_judge_evidence_chars}-r{current.workbook_judge_rationale_chars}"


# hallucinations_v1's two prompts are constrained from their first recording on, so each one's format is
# keyed from the start; other judges keep the version above. Bump the one whose grammar or token budget
# changes. h2: the segmenter may write at most one line per sentence. h3: the validator's budget counts the
# sentence lines it must copy, not only its own fields (under h2 a long sentence's reply was cut, unparsed).
SEGMENTER_FORMAT_VERSION, VALIDATOR_FORMAT_VERSION = "h2", "h3"


def format_key(request: dict) -> dict:
    """Return what the workbook's own judge format adds to a request's cassette key: {"judge_format":
    version} for a hallucinations_v1 prompt (keyed from its first recording) or for a request the version in
    force constrains differently from v1, else {} (so v1's digests, and every request a new version leaves as
    it was, keep replaying)."""
    if "response_schema" in request["config"]:
        return {}
    if judge_kind(request) == "hallucination":
        segmenter = _SEGMENTER in last_prompt(request)
        return {"judge_format": SEGMENTER_FORMAT_VERSION if segmenter else VALIDATOR_FORMAT_VERSION}
    version = judge_format_version()
    if version == _UNKEYED_VERSION or _constraint(request, version) == _constraint(request, _UNKEYED_VERSION):
        return {}
    return {"judge_format": version}


def judge_output_constraint(request: dict) -> dict:
    """Return llama.cpp constraint fields (json_schema or grammar, max_tokens) for a request, or {}.

    A request's own response schema wins. Otherwise ADK's LLM-judge prompts are answered in the
    exact format ADK's parsers read (the judge format in force); what goes into each field, the
    verdict included, is still the model's own choice.
    """
    return _constraint(request, judge_format_version())


def _constraint(request: dict, version: str) -> dict:
    if "response_schema" in request["config"]:
        return {"json_schema": request["config"]["response_schema"]}
    kind = judge_kind(request)
    if kind == "reference":
        return {"grammar": REFERENCE_JUDGE_GRAMMAR, "max_tokens": 160}
    prompt = last_prompt(request)
    if kind == "rubric" and _FINAL_RESPONSE_RUBRIC in prompt:
        return _rubric_constraint(rubric_properties(prompt), version)
    if kind == "hallucination" and _SEGMENTER in prompt:
        response = prompt.rsplit("**Response Begin**", 1)[1].split("**Response End**", 1)[0]
        return {"grammar": segmenter_grammar(response), "max_tokens": 40 + len(response) // 2}
    if kind == "hallucination":
        sentences = validator_sentences(prompt)
        copied = sum(len(sentence) for sentence in sentences) // 2  # the fixed sentence lines, generously
        return {"grammar": validator_grammar(sentences), "max_tokens": 40 + 110 * len(sentences) + copied}
    return {}


def _rubric_constraint(properties: list[tuple[str, str]], version: str) -> dict:
    if version == "v1":
        return {"grammar": rubric_grammar(properties), "max_tokens": 40 + 140 * len(properties)}
    current = settings()
    evidence, rationale = current.workbook_judge_evidence_chars, current.workbook_judge_rationale_chars
    short = [(rubric_id, " ".join(text.split()[:_V2_PROPERTY_WORDS])) for rubric_id, text in properties]
    # Room for every block even at one token per character, so a reply is never cut short of a verdict.
    per_block = 40 + _V2_PROPERTY_WORDS * 2 + evidence + rationale
    return {"grammar": rubric_grammar(short, evidence, rationale), "max_tokens": 40 + per_block * len(properties)}


# hallucinations_v1 asks first for the answer split into <sentence> lines (the split is the model's
# own), then for one labelled block per sentence, which ADK reads with a regex.
_SEGMENTER = "segment the provided response sentence by sentence"


def segmenter_grammar(response: str) -> str:
    """Return a GBNF grammar for hallucinations_v1's segmenter: <sentence> lines, at most one per sentence
    end or line break in the response (unbounded, a small model went on splitting into single words)."""
    most = max(1, len(re.findall(r"[.!?:;](?=\s|$)|\n\s*\S", response.strip())))
    return f'root ::= line{{1,{most}}}\nline ::= "<sentence>" [^<\\n]{{1,400}} "</sentence>\\n"\n'


HALLUCINATION_LABELS = ("supported", "unsupported", "contradictory", "disputed", "not_applicable")


def validator_sentences(prompt: str) -> list[str]:
    """Return the sentences a hallucinations_v1 validator prompt asks about, in order."""
    block = prompt.rsplit("**Sentences Begin**", 1)[1].split("**Sentences End**", 1)[0]
    return re.findall(r"<sentence>(.*?)</sentence>", block, re.S)


def validator_grammar(sentences: list[str]) -> str:
    """Return a GBNF grammar for hallucinations_v1's validator blocks, one per sentence.

    The sentence line is fixed to the prompt's own text, so ADK's parser sees every sentence once;
    the label is one of ADK's five; rationale and excerpts are single bounded lines.
    """
    blocks = []
    for index, sentence in enumerate(sentences):
        literal = json.dumps(f"sentence: {sentence.strip()}\n", ensure_ascii=False)
        separator = ' "\\n\\n"' if index < len(sentences) - 1 else ""
        fields = (
            '"label: " label "\\nrationale: " rationale "\\nsupporting_excerpt: " excerpt '
            '"\\ncontradicting_excerpt: " excerpt'
        )
        blocks.append(f"b{index} ::= {literal} {fields}{separator}")
    root = "root ::= " + " ".join(f"b{i}" for i in range(len(sentences)))
    labels = "label ::= " + " | ".join(f'"{label}"' for label in HALLUCINATION_LABELS)
    bounded = [labels, "rationale ::= [^\\n]{1,100}", "excerpt ::= [^\\n]{1,100}"]
    return "\n".join([root, *blocks, *bounded])


def rubric_properties(prompt: str) -> list[tuple[str, str]]:
    """Return the (rubric id, property text) pairs listed in a rubric judge prompt's <properties>."""
    block = prompt.rsplit("<properties>", 1)[1].split("</properties>", 1)[0]
    return re.findall(r"(?m)^\*\s+\[id: (.*?)\] (.*)$", block)


def rubric_grammar(properties: list[tuple[str, str]], evidence_chars: int = 160, rationale_chars: int = 200) -> str:
    """Return a GBNF grammar for ADK's rubric verdict blocks, one per (id, property).

    ID and Property are fixed to the given text, so ADK's parser always sees matching counts;
    Evidence and Rationale are single lines of at most the given characters; the verdict is yes or no.
    """
    blocks = []
    for index, (rubric_id, text) in enumerate(properties):
        literal = json.dumps(f"ID: {rubric_id}\nProperty: {text}\n", ensure_ascii=False)
        separator = ' "\\n"' if index < len(properties) - 1 else ""
        fields = '"Evidence: " evidence "\\nRationale: " rationale "\\nVerdict: " verdict "\\n"'
        blocks.append(f"b{index} ::= {literal} {fields}{separator}")
    root = "root ::= " + " ".join(f"b{i}" for i in range(len(properties)))
    bounded = [
        f"evidence ::= [^\\n]{{1,{evidence_chars}}}",
        f"rationale ::= [^\\n]{{1,{rationale_chars}}}",
        'verdict ::= "yes" | "no"',
    ]
    return "\n".join([root, *blocks, *bounded])


def parse_judge_reply(kind: str, text: str) -> dict:
    """Return what ADK's own parser reads in one judge reply: sample_score (None: unparsed), rationale,
    and for rubric judges the per-rubric verdicts ('yes,no,...')."""
    if kind == "reference":
        from google.adk.evaluation.final_response_match_v2 import Label, _parse_critique

        label = _parse_critique(text)
        match = re.search(r'"reasoning"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
        return {
            "sample_score": {Label.VALID: 1.0, Label.INVALID: 0.0}.get(label),
            "rationale": json.loads(f'"{match.group(1)}"') if match else "",
        }
    if kind == "rubric":
        from google.adk.evaluation.rubric_based_evaluator import DefaultAutoRaterResponseParser

        verdicts = DefaultAutoRaterResponseParser().parse(text)
        scores = [v.score for v in verdicts if v.score is not None]
        return {
            "sample_score": sum(scores) / len(scores) if scores else None,
            "rubric_verdicts": ",".join("yes" if v.score else "no" for v in verdicts),
            "rationale": " | ".join(
                f"{'yes' if v.score else 'no'}: {v.property_text} — {v.rationale}" for v in verdicts
            ),
        }
    if kind == "hallucination":
        from google.adk.evaluation.hallucinations_v1 import _parse_validation_results

        labels = [
            {key: block[key] for key in ("sentence", "label", "rationale")} for block in _parse_validation_results(text)
        ]
        scored = [label["label"].lower() in ("supported", "not_applicable") for label in labels]
        return {
            "sample_score": sum(scored) / len(scored) if scored else None,  # ADK's accuracy score
            "sentence_labels": json.dumps(labels, ensure_ascii=False),
            "rationale": " | ".join(f"{label['label']}: {label['sentence']}" for label in labels),
        }
    return {"sample_score": None, "rationale": ""}


_REFERENCE_LABEL = re.compile(r'"is_the_agent_response_valid"\s*:\s*"')


def verdict_probability(text: str, logprobs: dict) -> float | None:
    """Return P(valid) of a reference judge reply: at the token where its label starts, the probability
    of the tokens that begin "valid" over those that begin "valid" or "invalid" (llama.cpp's
    probabilities come before the grammar, so they are renormalized over the two labels). Only the
    recorded alternatives count: when one label is missing from them, its probability was below the last
    one's and P is 0 or 1. None when the reply has no label or neither label is among them."""
    label = _REFERENCE_LABEL.search(text)
    if not label:
        return None
    # Walk back from the end: the label and what follows it are ASCII, while a token earlier in the
    # reasoning may hold part of a multi-byte character, which would shift offsets counted from the start.
    after = len(text) - label.end()  # characters from the label's first one to the end
    seen = 0
    for chosen, alternatives in zip(reversed(logprobs["chosen"]), reversed(logprobs["top"]), strict=True):
        seen += len(chosen[0])
        if seen >= after:
            prefix = chosen[0][: seen - after]  # the part of this token before the label
            return _label_share(prefix, dict([*alternatives, chosen]))
    return None


def _label_share(prefix: str, candidates: dict[str, float]) -> float | None:
    weights = {"valid": 0.0, "invalid": 0.0}
    for token, logprob in candidates.items():
        rest = token[len(prefix) :] if token.startswith(prefix) else ""
        for name in weights:
            if rest and (name.startswith(rest) or rest.startswith(name + '"')):
                weights[name] += math.exp(logprob)
    total = weights["valid"] + weights["invalid"]
    return weights["valid"] / total if total else None


def call_kind(request: dict) -> str:
    """Return what a normalized request is, for costing: a judge kind ('reference', 'rubric',
    'hallucination') or 'agent' for any other call."""
    kind = judge_kind(request)
    return "agent" if kind == "other" else kind


def reply_kind(text: str) -> str:
    """Return which call a recorded reply answered, read from its layout: 'reference', 'rubric' or 'agent'."""
    if '"is_the_agent_response_valid"' in text:
        return "reference"
    if re.search(r"(?m)^Property: ", text) and re.search(r"(?m)^Verdict: ", text):
        return "rubric"
    return "agent"


def placeholder_reply(request: dict, note: str) -> str:
    """Return a stand-in reply carrying `note`, in the layout ADK's parser reads for the request's judge
    prompt (every verdict positive, every sentence supported), or `note` itself for any other call."""
    kind = judge_kind(request)
    if kind == "reference":
        return json.dumps({"reasoning": note, "is_the_agent_response_valid": "valid"}, indent=2)
    if kind == "rubric":
        blocks = [
            f"ID: {rubric_id}\nProperty: {text}\nEvidence: {note}\nRationale: {note}\nVerdict: yes\n"
            for rubric_id, text in rubric_properties(last_prompt(request))
        ]
        return "\n".join(blocks)
    if kind == "hallucination" and _SEGMENTER in last_prompt(request):
        return f"<sentence>{note}</sentence>\n"
    if kind == "hallucination":
        return "\n\n".join(
            f"sentence: {sentence}\nlabel: supported\nrationale: {note}\nsupporting_excerpt: {note}\n"
            "contradicting_excerpt: null"
            for sentence in validator_sentences(last_prompt(request))
        )
    return note
