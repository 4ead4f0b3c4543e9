"""OpenAI's chat completions (`POST /v1/chat/completions`, as vLLM serves them) over the same engine.

The messages are rendered with the model's chat template (the checkpoint tokenizer's own, or the Jinja
template `glmcheck serve --chat-template` names, as vLLM's flag) into a prompt whose ids carry no BOS of the
tokenizer's own (the template writes what the model expects, as vLLM encodes it); a model without one is a
400 naming the missing template. Request: `messages` (role and content: a string, or a list of
{"type": "text", "text"} parts), `model`, `max_tokens` or `max_completion_tokens` (default 16, as
/v1/completions: there is no KV cache, each token re-runs the prefill), `temperature` 0 or absent,
`logprobs` (bool) with `top_logprobs` (0..max_logprobs), `stop`, `stream` with `stream_options`, `seed`,
`user`, `add_generation_prompt` (default true); vLLM's `stop_token_ids`, `ignore_eos` (default false: EOS
ends the reply), `include_stop_str_in_output`, `skip_special_tokens`; sampling fields only at their neutral
values. Response: a `chat.completion` with one choice, `message` {"role": "assistant", "content"},
`logprobs` {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]} or null, `finish_reason`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import lru_cache

from glmcheck.serve.codec import TokenCodec
from glmcheck.serve.engine import Generation, Scored, Served, Stop
from glmcheck.serve.schemas import (
    DEFAULT_MAX_TOKENS,
    NEUTRAL_SAMPLING,
    Prompt,
    RequestError,
    boolean,
    check_known,
    check_lengths,
    describe,
    greedy_temperature,
    integer,
    neutral_sampling,
    stop_strings,
    stop_token_ids,
    stream_settings,
)
from glmcheck.serve.streaming import DONE, Failure, Progress, StreamShape, error_event, event, safe_text, steps

CHAT_FIELDS = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop",
               "stream", "stream_options", "seed", "user", "logprobs", "top_logprobs", "presence_penalty",
               "frequency_penalty", "logit_bias", "top_k", "min_p", "repetition_penalty", "min_tokens",
               "stop_token_ids", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
               "add_generation_prompt")
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat request: its rendered prompt and the generation it asks for."""

    prompt: Prompt
    max_tokens: int
    logprobs: bool
    top: int
    stop: Stop
    skip_special: bool
    stream: bool
    include_usage: bool


def missing_template(served: Served) -> str:
    return (f"the model `{served.name}` has no chat template (its tokenizer defines none): start glmcheck serve with "
            f"--chat-template FILE (a Jinja template, as vLLM's --chat-template), or use /v1/completions")


@lru_cache(maxsize=4)
def _compiled(template: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = time.strftime
    return env.from_string(template)


def render(template: str, messages: list[dict], codec: TokenCodec, add_generation_prompt: bool = True) -> str:
    """The prompt text of `messages` under the Jinja chat `template` (as transformers renders one)."""
    return _compiled(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                      bos_token=codec.special_text("bos"), eos_token=codec.special_text("eos"))


def check_template(template: str) -> None:
    """ValueError when `template` is not a Jinja template (`--chat-template` at startup)."""
    from jinja2.exceptions import TemplateError

    try:
        _compiled(template)
    except TemplateError as err:
        raise ValueError(f"--chat-template is not a Jinja template: {err}") from None


def _messages(value: object) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise RequestError("messages", f"expected a non-empty list of messages, got {describe(value)}")
    found = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        message = check_known(message, ("role", "content", "name"), f"{where}.")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise RequestError(f"{where}.role", f"expected one of {', '.join(ROLES)}, got {describe(role)}")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise RequestError(f"{where}.content[{j}]", f"expected a {{\"type\": \"text\", \"text\": ...}} "
                                                               f"part (text only), got {describe(part)}")
                parts.append(part["text"])
            content = "\n".join(parts)
        if not isinstance(content, str):
            raise RequestError(f"{where}.content", f"expected a string or a list of text parts, got "
                                                   f"{describe(content)}")
        found.append({**message, "content": content})
    return found


def parse_chat(body: object, served: Served) -> ChatRequest:
    """Validate a chat completions request and render its prompt (module docstring); RequestError otherwise."""
    from jinja2.exceptions import TemplateError

    body = check_known(body, CHAT_FIELDS)
    model = body.get("model")
    if model is not None and model != served.name:
        raise RequestError("model", f"the model `{model}` does not exist; this server serves `{served.name}`", 404)
    if "messages" not in body:
        raise RequestError("messages", "required")
    messages = _messages(body["messages"])
    template = served.chat_template or served.codec.chat_template
    if template is None:
        raise RequestError("messages", missing_template(served))
    greedy_temperature(body)
    neutral_sampling(body, {k: v for k, v in NEUTRAL_SAMPLING.items() if k not in ("best_of", "suffix")})
    integer(body, "seed", None, minimum=-(2**63), maximum=2**64 - 1)  # accepted, ignored: greedy
    stream, include_usage = stream_settings(body)
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = integer(body, name, DEFAULT_MAX_TOKENS, minimum=1)
    logprobs = boolean(body, "logprobs", False)
    top = integer(body, "top_logprobs", None, minimum=0, maximum=served.max_logprobs)
    if top is not None and not logprobs:
        raise RequestError("top_logprobs", "given without logprobs: true")
    try:
        text = render(template, messages, served.codec, boolean(body, "add_generation_prompt", True))
    except TemplateError as err:
        raise RequestError("messages", f"the chat template refused them: {err}") from None
    prompt = Prompt(served.codec.encode(text, add_bos=False), text)
    if not prompt.ids:
        raise RequestError("messages", "the chat template rendered them as an empty prompt")
    check_lengths([prompt], max_tokens, served, "messages", name)
    eos = served.codec.eos_id
    ends = stop_token_ids(body, served) | (frozenset() if boolean(body, "ignore_eos", False) or eos is None
                                           else frozenset({eos}))
    stop = Stop(stop_strings(body), ends, boolean(body, "include_stop_str_in_output", False))
    return ChatRequest(prompt, max_tokens, logprobs, top or 0, stop, boolean(body, "skip_special_tokens", True),
                       stream, include_usage)


def chat_job(request: ChatRequest) -> dict:
    """`Served.generate`'s arguments for `request`."""
    return {"ids": request.prompt.ids, "max_new": request.max_tokens, "top": request.top, "stop": request.stop,
            "skip_special": request.skip_special}


def _entry(token: int, logprob: float, served: Served) -> dict:
    text = served.codec.token_text(token)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(output: list[Scored], request: ChatRequest, served: Served) -> dict | None:
    """`logprobs` of a chat choice: per generated token its entry and its top `top_logprobs` entries."""
    if not request.logprobs:
        return None
    return {"content": [{**_entry(p.token, p.logprob, served),
                         "top_logprobs": [_entry(t, lp, served) for t, lp in (p.top or ())[:request.top]]}
                        for p in output]}


def _usage(request: ChatRequest, output: list[Scored]) -> dict:
    return {"prompt_tokens": len(request.prompt.ids), "completion_tokens": len(output),
            "total_tokens": len(request.prompt.ids) + len(output)}


def chat_response(request: ChatRequest, result: Generation, served: Served, chat_id: str) -> dict:
    """The `chat.completion` object for `request`."""
    choice = {"index": 0, "message": {"role": "assistant", "content": result.text},
              "logprobs": chat_logprobs(result.output, request, served), "finish_reason": result.finish,
              "stop_reason": result.matched}
    return {"id": chat_id, "object": "chat.completion", "created": int(time.time()), "model": served.name,
            "choices": [choice], "usage": _usage(request, result.output)}


async def chat_stream(request: ChatRequest, served: Served, chat_id: str) -> AsyncIterator[str]:
    """The server-sent events of a streamed chat completion (`glmcheck.serve.streaming`)."""
    shape = StreamShape("chat.completion.chunk", chat_id, served.name)
    yield event(shape.chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}]))
    from glmcheck.serve.codec import TextWidths

    state = Progress(TextWidths(served.codec, request.skip_special))
    output: list[Scored] = []
    async for step in steps(served, [chat_job(request)]):
        if isinstance(step, Failure):
            yield error_event(step.error)
            break
        text = step.text if step.done else safe_text(step.text, request.stop)
        delta = text[len(state.sent_text):] if text.startswith(state.sent_text) else ""
        new = step.output[state.sent_tokens:]
        if not (delta or new or step.done):
            continue
        state.sent_text, state.sent_tokens, output = state.sent_text + delta, len(step.output), step.output
        yield event(shape.chunk([{"index": 0, "delta": {"content": delta} if delta else {},
                                  "logprobs": chat_logprobs(new, request, served), "finish_reason": step.finish,
                                  "stop_reason": step.matched}]))
    else:
        if request.include_usage:
            yield event(shape.chunk([], usage=_usage(request, output)))
    yield DONE
