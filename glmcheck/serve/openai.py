"""The OpenAI legacy completions response (as vLLM serves it) built from the engine's generations.

`logprobs` (when the request asked for k of them) lists, per token: its string (`tokens`: the
tokenizer's text of the id, or "token_id:N" with `return_tokens_as_token_ids`), its logprob
(`token_logprobs`; null for the first prompt token, as OpenAI does), a dict of the k most likely
token strings to their logprobs plus the token itself when it is not among them (`top_logprobs`;
null for the first prompt token; two ids with one string keep the likelier one) and `text_offset`,
the offset of each token string in the concatenation of the token strings (the prompt's first
with `echo`). With `echo` the prompt's tokens come first and `text` starts with the prompt.
"""

from __future__ import annotations

import time
import uuid

from glmcheck.serve.engine import Generation, Scored, Served
from glmcheck.serve.schemas import CompletionRequest


def completion_response(request: CompletionRequest, results: list[Generation], served: Served) -> dict:
    """The `text_completion` object for `request`, one choice per prompt, in the prompts' order."""
    choices = []
    for index, (prompt, result) in enumerate(zip(request.prompts, results)):
        positions = (result.prompt if request.echo else []) + result.output
        logprobs = None if request.logprobs is None else _logprobs(positions, request, served)
        choices.append({"index": index, "text": (prompt.text if request.echo else "") + result.text,
                        "logprobs": logprobs, "finish_reason": result.finish, "stop_reason": result.matched})
    prompt_tokens = sum(len(p.ids) for p in request.prompts)
    completion_tokens = sum(len(r.output) for r in results)
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": served.name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def _logprobs(positions: list[Scored], request: CompletionRequest, served: Served) -> dict:
    def name(token: int) -> str:
        return f"token_id:{token}" if request.tokens_as_ids else served.codec.token_text(token)

    tokens = [name(p.token) for p in positions]
    offsets, at = [], 0
    for token in tokens:
        offsets.append(at)
        at += len(token)
    return {"tokens": tokens, "token_logprobs": [p.logprob for p in positions],
            "top_logprobs": [_top(p, name) for p in positions], "text_offset": offsets}


def _top(position: Scored, name) -> dict[str, float] | None:
    if position.top is None:
        return None
    top: dict[str, float] = {}
    for token, logprob in position.top:
        top.setdefault(name(token), logprob)
    top.setdefault(name(position.token), position.logprob)
    return top
