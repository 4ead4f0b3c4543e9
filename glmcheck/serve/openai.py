"""The OpenAI legacy completions response (as vLLM serves it) built from the engine's generations.

`logprobs` (when the request asked for k of them) lists, per token: its string (`tokens`: the
tokenizer's text of the id, or "token_id:N" with `return_tokens_as_token_ids`), its logprob
(`token_logprobs`; null for the first prompt token, as OpenAI does), a dict of the k most likely
token strings to their logprobs plus the token itself when it is not among them (`top_logprobs`;
null for the first prompt token; two ids with one string keep the likelier one) and `text_offset`,
where the token's text starts in `text` (`glmcheck.serve.codec.TextWidths`: the BOS put before a text
prompt has no text, so it and the token after it both sit at 0; vLLM counts the BOS string's length
instead, so its later offsets miss `text` by that much: docs/serving.md, "What serve answers").
With `echo` the prompt's tokens come first and `text` starts with the prompt.

vLLM's `prompt_logprobs` (k) adds `choices[i].prompt_logprobs`: null for the first prompt token, then per
prompt token a dict {token id as a string: {"logprob", "rank", "decoded_token"}} of the k most likely ids
and the prompt's own token.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence

from glmcheck.serve.codec import TextWidths
from glmcheck.serve.engine import Generation, Scored, Served
from glmcheck.serve.schemas import CompletionRequest, Prompt
from glmcheck.serve.streaming import DONE, Failure, Progress, StreamShape, error_event, event, safe_text, steps


def completion_response(request: CompletionRequest, results: list[Generation], served: Served) -> dict:
    """The `text_completion` object for `request`, one choice per prompt, in the prompts' order."""
    choices = []
    for index, (prompt, result) in enumerate(zip(request.prompts, results)):
        scored = result.prompt if request.echo else []
        logprobs = None
        if request.logprobs is not None:
            logprobs = logprobs_block(request, served, scored, result.output, prompt.text if request.echo else "")
        choice = {"index": index, "text": (prompt.text if request.echo else "") + result.text, "logprobs": logprobs,
                  "finish_reason": result.finish, "stop_reason": result.matched}
        if request.prompt_logprobs is not None:
            choice["prompt_logprobs"] = prompt_logprobs(result.prompt, request.prompt_logprobs, served)
        choices.append(choice)
    return {"id": completion_id(), "object": "text_completion", "created": int(time.time()),
            "model": served.name, "choices": choices, "usage": usage(request.prompts, results)}


async def completion_stream(request: CompletionRequest, served: Served, jobs: list[dict]) -> AsyncIterator[str]:
    """The server-sent events of a streamed completion (`glmcheck.serve.streaming`)."""
    shape = StreamShape("text_completion", completion_id(), served.name)
    progress = [Progress(TextWidths(served.codec, request.skip_special, len(p.text) if request.echo else 0))
                for p in request.prompts]
    finished: dict[int, Generation] = {}
    async for step in steps(served, jobs):
        if isinstance(step, Failure):
            yield error_event(step.error)
            break
        state, prompt = progress[step.index], request.prompts[step.index]
        head = prompt.text if request.echo and not state.started else ""
        scored = step.prompt if request.echo and not state.started else []
        text = step.text if step.done else safe_text(step.text, request.stop)
        delta = text[len(state.sent_text):] if text.startswith(state.sent_text) else ""
        new = step.output[state.sent_tokens:]
        if not (head or delta or new or step.done):
            continue
        logprobs = None
        if request.logprobs is not None:
            logprobs = logprobs_block(request, served, scored, new, head, state.widths)
        state.started, state.sent_text, state.sent_tokens = True, state.sent_text + delta, len(step.output)
        yield event(shape.chunk([{"index": step.index, "text": head + delta, "logprobs": logprobs,
                                  "finish_reason": step.finish, "stop_reason": step.matched}]))
        if step.done:
            finished[step.index] = Generation(step.prompt, step.output, step.text)
    else:
        if request.include_usage:
            results = [finished[i] for i in range(len(request.prompts))]
            yield event(shape.chunk([], usage=usage(request.prompts, results)))
    yield DONE


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def usage(prompts: Sequence[Prompt], results: Sequence[Generation]) -> dict:
    prompt_tokens = sum(len(p.ids) for p in prompts)
    completion_tokens = sum(len(r.output) for r in results)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def logprobs_block(request: CompletionRequest, served: Served, prompt: Sequence[Scored], output: Sequence[Scored],
                   prompt_text: str, output_widths: TextWidths | None = None) -> dict:
    """`logprobs` of the scored `prompt` positions (echo) then the `output` ones. Offsets index the choice's
    text: the prompt's from 0, the output's from len(prompt_text), or (streaming) where `output_widths`, the
    run carried between chunks, has got to."""
    def name(token: int) -> str:
        return f"token_id:{token}" if request.tokens_as_ids else served.codec.token_text(token)

    offsets = TextWidths(served.codec).offsets([p.token for p in prompt])
    widths = output_widths or TextWidths(served.codec, request.skip_special, len(prompt_text))
    offsets += widths.offsets([p.token for p in output])
    positions = [*prompt, *output]
    return {"tokens": [name(p.token) for p in positions], "token_logprobs": [p.logprob for p in positions],
            "top_logprobs": [_top(p, request.logprobs or 0, name) for p in positions], "text_offset": offsets}


def prompt_logprobs(prompt: Sequence[Scored], k: int, served: Served) -> list[dict | None]:
    """vLLM's `prompt_logprobs` (the `k` most likely ids) of the scored prompt positions (module docstring)."""
    found: list[dict | None] = []
    for position in prompt:
        if position.logprob is None:
            found.append(None)
            continue
        entry = {str(token): {"logprob": logprob, "rank": rank + 1, "decoded_token": served.codec.token_text(token)}
                 for rank, (token, logprob) in enumerate((position.top or ())[:k])}
        entry.setdefault(str(position.token), {"logprob": position.logprob, "rank": position.rank,
                                               "decoded_token": served.codec.token_text(position.token)})
        found.append(entry)
    return found


def _top(position: Scored, k: int, name) -> dict[str, float] | None:
    if position.top is None:
        return None
    top: dict[str, float] = {}
    for token, logprob in position.top[:k]:
        top.setdefault(name(token), logprob)
    top.setdefault(name(position.token), position.logprob)
    return top
