"""Request validation shared by both APIs, and the OpenAI legacy completions request.

Every refusal is a `RequestError` whose message starts with the field it is about and says what was
expected; the app answers it as an OpenAI-style error body (`{"error": {"message", "type", "param",
"code"}}`, 400, or 404 for a model this server does not serve). Fields are checked strictly: a field
neither API defines is refused by name, and a sampling field is taken only at the value that leaves
greedy decoding as it is (`n` 1, `top_p` 1, penalties 0, ...), so no request is silently answered
as something it did not ask for.

/v1/completions takes `model` (absent: the served model, as vLLM), `prompt` (a string, a list of
strings, a list of token ids or a list of lists: one choice per prompt), `max_tokens` (default 16;
0 only with `echo`), `temperature` (0 or absent: greedy), `logprobs` (0..max_logprobs or null),
`echo`, `stop` (honoured: text cut before the earliest match, finish_reason "stop"), `seed` and `user`
(ignored: greedy), `stream` (server-sent events, `glmcheck.serve.streaming`) with `stream_options`
{"include_usage"}; vLLM's `stop_token_ids`, `ignore_eos` (absent: EOS does not end a continuation, as the
harness's greedy continuations; false: it does), `include_stop_str_in_output`, `skip_special_tokens`,
`return_tokens_as_token_ids` (tokens as "token_id:N") and `prompt_logprobs` (0..max_logprobs: each prompt
token's logprob, rank and the k most likely ids).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from glmcheck.serve.engine import Served, Stop

MAX_STOP_STRINGS = 16


class RequestError(ValueError):
    """A request the server refuses: `param` names the field, `status` is 400 or 404."""

    def __init__(self, param: str, message: str, status: int = 400):
        super().__init__(f"{param}: {message}" if param else message)
        self.param, self.status = param, status


@dataclass(frozen=True)
class Prompt:
    """One prompt's token ids and its text (the string given, or the ids' decoded text)."""

    ids: list[int]
    text: str


def describe(value: object) -> str:
    """`value` as JSON (as the client wrote it), shortened."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(value: object, allowed: object) -> bool:
    """value == allowed, with bools equal only to bools and numbers only to numbers (1.0 == 1)."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed
    if isinstance(allowed, (int, float)):
        return isinstance(value, (int, float)) and value == allowed
    return type(value) is type(allowed) and value == allowed


def check_known(body: object, known: Iterable[str], where: str = "") -> dict:
    """`body` as a dict whose every field is in `known` (RequestError naming the first other one)."""
    if not isinstance(body, dict):
        raise RequestError(where or "body", f"expected a JSON object, got {describe(body)}")
    known = set(known)
    for name in body:
        if name not in known:
            raise RequestError(f"{where}{name}", f"unknown field; this endpoint takes {', '.join(sorted(known))}")
    return body


def integer(body: dict, name: str, default: int | None, *, minimum: int, maximum: int | None = None,
            where: str = "") -> int | None:
    """The int field `name` (null or absent: `default`) within [minimum, maximum]."""
    value = body.get(name)
    if value is None:
        return default
    bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
        raise RequestError(f"{where}{name}", f"expected an int {bounds}, got {describe(value)}")
    return value


def boolean(body: dict, name: str, default: bool, where: str = "") -> bool:
    """The bool field `name` (null or absent: `default`)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{where}{name}", f"expected true or false, got {describe(value)}")
    return value


def neutral(body: dict, name: str, allowed: tuple, why: str, where: str = "") -> None:
    """A field this greedy server takes only at a value that changes nothing (null always allowed)."""
    value = body.get(name)
    if value is None:
        return
    if not any(_same(value, a) for a in allowed):
        raise RequestError(f"{where}{name}", f"{describe(value)} is not supported: {why}")


def greedy_temperature(body: dict, name: str = "temperature", where: str = "") -> None:
    """`temperature` must be 0 or absent: this server decodes greedily."""
    neutral(body, name, (0,), "this server decodes greedily (temperature 0 or absent)", where)


def stop_strings(body: dict, name: str = "stop", where: str = "") -> tuple[str, ...]:
    """`stop`: null, a string or a list of up to MAX_STOP_STRINGS strings (empty strings dropped)."""
    value = body.get(name)
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values) or len(values) > MAX_STOP_STRINGS:
        raise RequestError(f"{where}{name}", f"expected a string or a list of at most {MAX_STOP_STRINGS} strings, "
                                             f"got {describe(value)}")
    return tuple(v for v in values if v)


def stop_token_ids(body: dict, served: Served, name: str = "stop_token_ids", where: str = "") -> frozenset[int]:
    """`stop_token_ids`: null or a list of ids in the vocabulary."""
    value = body.get(name)
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(_is_int(v) and 0 <= v < served.vocab_size for v in value):
        raise RequestError(f"{where}{name}", f"expected a list of token ids in [0, {served.vocab_size}), "
                                             f"got {describe(value)}")
    return frozenset(value)


def eos_stop(body: dict, served: Served, name: str = "ignore_eos", where: str = "") -> frozenset[int]:
    """{EOS} when `ignore_eos` is false; nothing when true or absent (EOS never ends a continuation
    unless asked: the harness's continuations run their full length)."""
    if boolean(body, name, True, where) or served.codec.eos_id is None:
        return frozenset()
    return frozenset({served.codec.eos_id})


def _token_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_int(v) for v in value)


def prompts(value: object, served: Served, name: str, *, text_only: bool = False) -> tuple[list[Prompt], bool]:
    """The prompts of `value` and whether it was a batch: a string, a list of strings, a list of
    token ids, or a list of lists of token ids (`text_only`: strings only). Each prompt is non-empty
    and its ids lie in the vocabulary."""
    if isinstance(value, str):
        return [_text_prompt(value, served, name)], False
    if _token_list(value) and not text_only:
        return [_ids_prompt(value, served, name)], False
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [_text_prompt(v, served, f"{name}[{i}]") for i, v in enumerate(value)], True
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value) and not text_only:
        return [_ids_prompt(v, served, f"{name}[{i}]") for i, v in enumerate(value)], True
    expected = "a string or a list of strings" if text_only else \
        "a string, a list of strings, a list of token ids or a list of lists of token ids"
    what = "an empty list" if value == [] else describe(value)
    raise RequestError(name, f"expected {expected} (non-empty), got {what}")


def _text_prompt(text: str, served: Served, name: str) -> Prompt:
    if not text:
        raise RequestError(name, "empty prompt; give at least one character")
    return Prompt(served.codec.encode(text), text)


def _ids_prompt(ids: list, served: Served, name: str) -> Prompt:
    if not ids:
        raise RequestError(name, "empty prompt; give at least one token id")
    for i, token in enumerate(ids):
        if not _is_int(token) or not 0 <= token < served.vocab_size:
            raise RequestError(f"{name}[{i}]",
                               f"expected a token id in [0, {served.vocab_size}), got {describe(token)}")
    return Prompt(list(ids), served.codec.decode(ids))


def check_lengths(batch: list[Prompt], max_new: int, served: Served, name: str, length_name: str) -> None:
    """Each prompt plus `max_new` generated tokens fits the model's positions."""
    for i, prompt in enumerate(batch):
        where = f"{name}[{i}]" if len(batch) > 1 else name
        if len(prompt.ids) > served.positions:
            raise RequestError(where, f"{len(prompt.ids)} tokens, more than the model's {served.positions} positions")
        if len(prompt.ids) + max_new > served.positions:
            raise RequestError(length_name, f"{max_new} new tokens after a {len(prompt.ids)}-token prompt exceed the "
                                            f"model's {served.positions} positions")


COMPLETION_FIELDS = ("model", "prompt", "max_tokens", "temperature", "top_p", "n", "logprobs", "echo", "stop",
                     "stream", "stream_options", "seed", "user", "suffix", "best_of", "logit_bias",
                     "presence_penalty", "frequency_penalty", "top_k", "min_p", "repetition_penalty", "min_tokens",
                     "stop_token_ids", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
                     "return_tokens_as_token_ids", "prompt_logprobs")
DEFAULT_MAX_TOKENS = 16  # OpenAI's
# OpenAI's and vLLM's sampling fields, taken only at the value that leaves greedy decoding as it is
NEUTRAL_SAMPLING = {"top_p": ((1,), "greedy decoding takes top_p 1"), "n": ((1,), "one choice per prompt (n 1)"),
                    "best_of": ((1,), "one choice per prompt (best_of 1)"),
                    "suffix": (("",), "no suffix (insertion) support"),
                    "logit_bias": (({},), "greedy over the model's own logits (no logit_bias)"),
                    "presence_penalty": ((0,), "no penalties (0)"), "frequency_penalty": ((0,), "no penalties (0)"),
                    "repetition_penalty": ((1,), "no penalties (1)"),
                    "top_k": ((-1, 0), "greedy decoding takes top_k -1 or 0"),
                    "min_p": ((0,), "greedy decoding takes min_p 0"),
                    "min_tokens": ((0,), "min_tokens 0 (EOS ends nothing unless ignore_eos is false)")}


def neutral_sampling(body: dict, fields: dict[str, tuple[tuple, str]]) -> None:
    """Each of `fields` (name: (allowed values, why)) at a neutral value (`neutral`)."""
    for name, (allowed, why) in fields.items():
        neutral(body, name, allowed, why)


@dataclass(frozen=True)
class CompletionRequest:
    """A validated /v1/completions request."""

    prompts: list[Prompt]
    max_tokens: int
    logprobs: int | None
    echo: bool
    stop: Stop
    skip_special: bool
    tokens_as_ids: bool
    stream: bool = False
    include_usage: bool = False
    prompt_logprobs: int | None = None

    @property
    def top(self) -> int:
        """The most likely ids the engine keeps at a position: what `logprobs` and `prompt_logprobs` ask."""
        return max(self.logprobs or 0, self.prompt_logprobs or 0)

    @property
    def scores_prompt(self) -> bool:
        return self.echo or self.prompt_logprobs is not None


def stream_settings(body: dict, where: str = "") -> tuple[bool, bool]:
    """(`stream`, `stream_options.include_usage`): options only with a stream, as OpenAI."""
    stream = boolean(body, "stream", False, where)
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise RequestError(f"{where}stream_options", "given without stream: true")
    options = check_known(options, ("include_usage", "continuous_usage_stats"), f"{where}stream_options.")
    neutral(options, "continuous_usage_stats", (False,), "usage comes in the last chunk only",
            f"{where}stream_options.")
    return stream, boolean(options, "include_usage", False, f"{where}stream_options.")


def parse_completion(body: object, served: Served) -> CompletionRequest:
    """Validate an OpenAI legacy completions request (module docstring); RequestError otherwise."""
    body = check_known(body, COMPLETION_FIELDS)
    model = body.get("model")
    if model is not None and model != served.name:
        if not isinstance(model, str):
            raise RequestError("model", f"expected a string, got {describe(model)}")
        raise RequestError("model", f"the model `{model}` does not exist; this server serves `{served.name}`", 404)
    if "prompt" not in body:
        raise RequestError("prompt", "required")
    greedy_temperature(body)
    neutral_sampling(body, NEUTRAL_SAMPLING)
    stream, include_usage = stream_settings(body)
    integer(body, "seed", None, minimum=-(2**63), maximum=2**64 - 1)  # accepted, ignored: greedy
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise RequestError("user", f"expected a string, got {describe(body['user'])}")
    echo = boolean(body, "echo", False)
    max_tokens = integer(body, "max_tokens", DEFAULT_MAX_TOKENS, minimum=0)
    if max_tokens == 0 and not echo:
        raise RequestError("max_tokens", "0 only with echo (scoring the prompt); give an int >= 1")
    logprobs = integer(body, "logprobs", None, minimum=0, maximum=served.max_logprobs)
    scored_prompt = integer(body, "prompt_logprobs", None, minimum=0, maximum=served.max_logprobs)
    batch, _ = prompts(body["prompt"], served, "prompt")
    check_lengths(batch, max_tokens, served, "prompt", "max_tokens")
    stop = Stop(stop_strings(body), stop_token_ids(body, served) | eos_stop(body, served),
                boolean(body, "include_stop_str_in_output", False))
    if stream and scored_prompt is not None:
        raise RequestError("prompt_logprobs", "not available with stream: true (as vLLM)")
    return CompletionRequest(batch, max_tokens, logprobs, echo, stop, boolean(body, "skip_special_tokens", True),
                             boolean(body, "return_tokens_as_token_ids", False), stream, include_usage, scored_prompt)


ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError",
               500: "InternalServerError", 503: "ServiceUnavailableError"}


def error_body(status: int, message: str, param: str | None = None) -> dict:
    """The OpenAI-style error object vLLM answers with: `status` the HTTP status, `param` the request field at fault."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param, "code": status}}
