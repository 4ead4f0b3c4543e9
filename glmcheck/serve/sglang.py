"""SGLang's native `/generate`: its request (`GenerateReqInput` and `sampling_params`, as SGLang
documents them) and its response, over the same engine as /v1/completions.

Request: `text` (a string or a list of strings) or `input_ids` (a list of ids or a list of lists),
`sampling_params` {`max_new_tokens` (default 128, SGLang's), `temperature` (0 or absent: greedy),
`stop`, `stop_token_ids`, `ignore_eos` (absent: EOS does not end a continuation; false: it does),
`no_stop_trim`, `skip_special_tokens`; the other sampling fields only at their neutral values},
`return_logprob`, `logprob_start_len` (default -1: the prompt's last token only), `top_logprobs_num`
(0..max_logprobs), `return_text_in_logprobs`, `rid`, `stream` false.
Response (a list of them for a batch): `{"text", "output_ids", "meta_info": {"id", "finish_reason":
{"type": "length", "length": N} or {"type": "stop", "matched": string or id}, "prompt_tokens",
"completion_tokens", "cached_tokens": 0, "e2e_latency"}}`; with `return_logprob` also
`input_token_logprobs` / `output_token_logprobs` ([logprob, id, text or null] per position; the first
input entry's logprob is null, as SGLang's) and, with `top_logprobs_num` > 0, `input_top_logprobs` /
`output_top_logprobs` (per position a list of top_logprobs_num such triples, most likely first; the
first input entry null).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from glmcheck.serve.engine import Generation, Scored, Served, Stop
from glmcheck.serve.schemas import (
    Prompt,
    RequestError,
    boolean,
    check_known,
    check_lengths,
    describe,
    eos_stop,
    greedy_temperature,
    integer,
    neutral,
    prompts,
    stop_strings,
    stop_token_ids,
)

GENERATE_FIELDS = ("text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num",
                   "return_text_in_logprobs", "stream", "rid", "token_ids_logprob", "return_hidden_states", "lora_path")
SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
                   "ignore_eos", "n", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
                   "skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens", "json_schema", "regex",
                   "ebnf")
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's
SP = "sampling_params."


@dataclass(frozen=True)
class GenerateRequest:
    """A validated /generate request; `logprob_start` -1 means each prompt's last token."""

    prompts: list[Prompt]
    batched: bool
    max_new: int
    return_logprob: bool
    logprob_start: int
    top: int
    text_in_logprobs: bool
    rids: list[str]
    stop: Stop
    skip_special: bool

    def prompt_from(self, prompt: Prompt) -> int | None:
        """The first prompt position scored for `prompt` (None: no logprobs asked)."""
        if not self.return_logprob:
            return None
        return len(prompt.ids) - 1 if self.logprob_start == -1 else self.logprob_start


def parse_generate(body: object, served: Served) -> GenerateRequest:
    """Validate a /generate request (module docstring); RequestError naming the field otherwise."""
    body = check_known(body, GENERATE_FIELDS)
    given = [name for name in ("text", "input_ids") if body.get(name) is not None]
    if len(given) != 1:
        raise RequestError("text", "give exactly one of text and input_ids" + (" (both given)" if given else ""))
    if given == ["text"]:
        batch, batched = prompts(body["text"], served, "text", text_only=True)
    else:
        ids = body["input_ids"]
        if isinstance(ids, str) or (isinstance(ids, list) and ids and all(isinstance(v, str) for v in ids)):
            raise RequestError("input_ids", "expected token ids, got text (give text for that)")
        batch, batched = prompts(ids, served, "input_ids")
    neutral(body, "stream", (False,), "responses are not streamed")
    neutral(body, "return_hidden_states", (False,), "hidden states are not returned")
    for name in ("token_ids_logprob", "lora_path"):
        if body.get(name) is not None:
            raise RequestError(name, "not supported by this server (null only)")
    sampling = check_known({} if body.get("sampling_params") is None else body["sampling_params"], SAMPLING_FIELDS,
                           SP if isinstance(body.get("sampling_params"), dict) else "sampling_params")
    max_new, stop = _sampling(sampling, served)
    check_lengths(batch, max_new, served, given[0], SP + "max_new_tokens")
    return_logprob = boolean(body, "return_logprob", False)
    start = integer(body, "logprob_start_len", -1, minimum=-1)
    for i, prompt in enumerate(batch if return_logprob else []):  # SGLang ignores it without return_logprob
        if start >= len(prompt.ids):
            raise RequestError("logprob_start_len", f"{start} is not below the {len(prompt.ids)} tokens of prompt {i}")
    top = integer(body, "top_logprobs_num", 0, minimum=0, maximum=served.max_logprobs)
    return GenerateRequest(batch, batched, max_new, return_logprob, start, top,
                           boolean(body, "return_text_in_logprobs", False), _rids(body.get("rid"), len(batch)), stop,
                           boolean(sampling, "skip_special_tokens", True, SP))


def _sampling(sampling: dict, served: Served) -> tuple[int, Stop]:
    greedy_temperature(sampling, where=SP)
    for name, allowed, why in (("top_p", (1,), "greedy decoding takes top_p 1"),
                               ("top_k", (-1, 0), "greedy decoding takes top_k -1 or 0"),
                               ("min_p", (0,), "greedy decoding takes min_p 0"),
                               ("n", (1,), "one output per prompt (n 1)"),
                               ("frequency_penalty", (0,), "no penalties (0)"),
                               ("presence_penalty", (0,), "no penalties (0)"),
                               ("repetition_penalty", (1,), "no penalties (1)"),
                               ("min_new_tokens", (0,), "min_new_tokens 0"),
                               ("spaces_between_special_tokens", (True,), "the tokenizer's own decoding only"),
                               ("json_schema", (), "no constrained decoding"),
                               ("regex", (), "no constrained decoding"),
                               ("ebnf", (), "no constrained decoding")):
        neutral(sampling, name, allowed, why, SP)
    max_new = integer(sampling, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS, minimum=0, where=SP)
    stop = Stop(stop_strings(sampling, where=SP),
                stop_token_ids(sampling, served, where=SP) | eos_stop(sampling, served, where=SP),
                boolean(sampling, "no_stop_trim", False, SP))
    return max_new, stop


def _rids(value: object, count: int) -> list[str]:
    if value is None:
        return [uuid.uuid4().hex for _ in range(count)]
    if isinstance(value, str) and count == 1:
        return [value]
    if isinstance(value, list) and len(value) == count and all(isinstance(v, str) for v in value):
        return list(value)
    what = "a string" if count == 1 else f"a list of {count} strings (one per prompt)"
    raise RequestError("rid", f"expected {what}, got {describe(value)}")


def generate_response(request: GenerateRequest, results: list[Generation], served: Served) -> dict | list[dict]:
    """SGLang's response for each prompt (module docstring): a list for a batch, else one object."""
    outputs = [_output(request, prompt, result, rid, served)
               for prompt, result, rid in zip(request.prompts, results, request.rids)]
    return outputs if request.batched else outputs[0]


def _output(request: GenerateRequest, prompt: Prompt, result: Generation, rid: str, served: Served) -> dict:
    finish = {"type": "length", "length": len(result.output)} if result.finish == "length" else \
        {"type": "stop", "matched": result.matched}
    meta = {"id": rid, "finish_reason": finish, "prompt_tokens": len(prompt.ids),
            "completion_tokens": len(result.output), "cached_tokens": 0, "e2e_latency": result.seconds}
    if request.return_logprob:
        def triple(token: int, logprob: float | None) -> list:
            return [logprob, token, served.codec.token_text(token) if request.text_in_logprobs else None]

        def tops(positions: list[Scored]) -> list:
            return [None if p.top is None else [triple(t, lp) for t, lp in p.top] for p in positions]

        meta["input_token_logprobs"] = [triple(p.token, p.logprob) for p in result.prompt]
        meta["output_token_logprobs"] = [triple(p.token, p.logprob) for p in result.output]
        if request.top:
            meta["input_top_logprobs"] = tops(result.prompt)
            meta["output_top_logprobs"] = tops(result.output)
    return {"text": result.text, "output_ids": [p.token for p in result.output], "meta_info": meta}
