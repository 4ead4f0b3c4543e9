"""Next-token distributions over the last W positions of a prompt, from a running server.

For a prompt of L token ids, the window is the distributions at prompt positions L-W .. L-1
(0-based): those predicting tokens L-W+1 .. L, the last one the first generated token's. Each is
the server's top-k as (token text, logprob in nats), most likely first (as `Completion.top`: k or
k + 1 entries). One request per prompt, one generated token:

- `openai`: `POST /v1/completions` {"model", "prompt": token_ids, "max_tokens": 1, "temperature": 0,
  "logprobs": k, "echo": true}. `choices[0].logprobs.top_logprobs` then has L + 1 entries: entry 0
  null (nothing predicts the first token), entry j (1 <= j < L) the distribution at position j - 1,
  entry L the generated token's (position L - 1); the window is the last W. vLLM: echo with logprobs
  sets prompt_logprobs = logprobs (`CompletionRequest.to_sampling_params`), and the response joins
  the prompt logprobs (first None) and the output's (`serving_completion.py`); each dict holds the top
  k plus the token itself. SGLang's /v1/completions (logprob_start_len 0, input + output top
  logprobs) and `glmcheck serve` count the same.
- `sglang`: `POST /generate` {"input_ids", "sampling_params": {"max_new_tokens": 1, "temperature": 0},
  "return_logprob": true, "logprob_start_len": L - W, "top_logprobs_num": k, "return_text_in_logprobs":
  true}. With logprob_start_len s, SGLang scores positions s .. L-1 but returns the last of them as
  the output's: `meta_info.input_top_logprobs` has L - s entries, entry 0 null (a pad: the scheduler
  prepends None and drops the last, "a sample token"), entry j >= 1 the distribution at position
  s + j - 1; `output_top_logprobs[0]` is position L - 1's. The window is input_top_logprobs[1:] +
  output_top_logprobs[:1].

Those counts are exact: a server that returns another number of entries, a null where the window
needs a distribution or fewer than k logprobs at a position raises EndpointError (the window's
positions would be guessed otherwise). A bad window, k or prompt is a ValueError.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from glmcheck.sources.completions import (
    NUMBER,
    PATHS,
    Malformed,
    TopEntry,
    _check_counts,
    _get,
    _ranked,
    _triple,
    check_concurrency,
    run_many,
)
from glmcheck.sources.endpoint import Endpoint, describe
from glmcheck.sources.transport import EndpointError, Http, HttpOptions

if TYPE_CHECKING:
    import httpx

Window = list[tuple[TopEntry, ...]]  # oldest position first


def window_body(protocol: str, model: str | None, token_ids: list[int], window: int, logprobs: int) -> dict[str, Any]:
    """The JSON body of one window request (see the module docstring)."""
    if protocol == "openai":
        return {"model": model, "prompt": token_ids, "max_tokens": 1, "temperature": 0, "logprobs": logprobs,
                "echo": True}
    return {"input_ids": token_ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True, "logprob_start_len": len(token_ids) - window, "top_logprobs_num": logprobs,
            "return_text_in_logprobs": True}


class _Count(Malformed):
    """A response with another number of entries than the request asks for."""


def _openai_slots(body: Any, length: int, window: int) -> list[tuple[Any, str]]:
    """(raw entry, where) of each window position in a /v1/completions echo answer."""
    choice = _get(_get(body, "choices", "choices", list), 0, "choices[0]", dict)
    logprobs = _get(choice, "logprobs", "choices[0].logprobs (the server returned no logprobs)", dict)
    where = "choices[0].logprobs.top_logprobs"
    tops = _get(logprobs, "top_logprobs", where, list)
    if len(tops) != length + 1:
        raise _Count(f"returned {len(tops)} {where} entries for a {length}-token prompt with echo, expected "
                     f"{length + 1} (one per prompt token, the first null, then the generated token's; the window "
                     f"takes the last {window}; echo ignored?)")
    return [(tops[j], f"{where}[{j}]") for j in range(length + 1 - window, length + 1)]


def _sglang_slots(body: Any, length: int, window: int) -> list[tuple[Any, str]]:
    """(raw entry, where) of each window position in a /generate answer with logprob_start_len L - W."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    meta = _get(body, "meta_info", "meta_info", dict)
    inputs = _get(meta, "input_top_logprobs", "meta_info.input_top_logprobs (top_logprobs_num ignored?)", list)
    outputs = _get(meta, "output_top_logprobs", "meta_info.output_top_logprobs (top_logprobs_num ignored?)", list)
    start = length - window
    if len(inputs) != window:
        raise _Count(f"returned {len(inputs)} meta_info.input_top_logprobs entries for a {length}-token prompt "
                     f"with logprob_start_len {start}, expected {window} (a null"
                     f"{f', then positions {start} .. {length - 2}' if window > 1 else ' only'}; logprob_start_len "
                     f"ignored?)")
    if len(outputs) != 1:
        raise _Count(f"returned {len(outputs)} meta_info.output_top_logprobs entries, expected 1 (max_new_tokens 1)")
    return [(inputs[j], f"meta_info.input_top_logprobs[{j}]") for j in range(1, window)] + \
        [(outputs[0], "meta_info.output_top_logprobs[0]")]


def _entries(raw: Any, where: str, protocol: str) -> list[TopEntry]:
    """One position's (text, logprob) pairs: an openai {text: logprob} or SGLang [[logprob, id, text], ...]."""
    if protocol == "openai":
        entry = _get([raw], 0, where, dict)
        for lp in entry.values():
            if not isinstance(lp, NUMBER) or isinstance(lp, bool):
                raise Malformed(f"has a logprob that is not a number in {where}")
        return [(str(t), float(lp)) for t, lp in entry.items()]
    entry = _get([raw], 0, where, list)
    return [(t, lp) for lp, _, t in (_triple(item, f"{where}[{j}]") for j, item in enumerate(entry))]


def _check_token_ids(token_ids: Any) -> None:
    if not (isinstance(token_ids, list) and token_ids and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in token_ids)):
        raise ValueError(f"token_ids must be a non-empty list of token ids (int >= 0), got {str(token_ids)[:60]}")


def _check_window(window: Any, length: int | None = None) -> None:
    if not (isinstance(window, int) and not isinstance(window, bool) and window >= 1
            and (length is None or window <= length)):
        bound = f"in [1, {length}] (the prompt's {length} tokens)" if length is not None else ">= 1"
        raise ValueError(f"window must be an integer {bound}, got {window!r}")


def prompt_window(endpoint: Endpoint, token_ids: list[int], window: int, logprobs: int, http: Http | None = None, *,
                  options: HttpOptions | None = None, transport: httpx.BaseTransport | None = None) -> Window:
    """The top-`logprobs` next-token distributions at prompt positions L-W .. L-1 of `token_ids` (L =
    len(token_ids), W = `window`), oldest first, each most likely first (module docstring). An openai endpoint
    without a model asks the server first. `http` is a client to reuse (else one is opened for this
    call, with `options` and `transport`). EndpointError on any failure; ValueError on a bad argument."""
    _check_token_ids(token_ids)
    _check_window(window, len(token_ids))
    _check_counts(1, logprobs)
    if http is None:
        with endpoint.connect(options, transport=transport) as own:
            return prompt_window(endpoint, token_ids, window, logprobs, own)
    if endpoint.protocol == "openai" and endpoint.model is None:
        endpoint = describe(endpoint, http).endpoint
    path, length = PATHS[endpoint.protocol], len(token_ids)
    body = http.post(path, window_body(endpoint.protocol, endpoint.model, token_ids, window, logprobs))
    try:
        slots = (_openai_slots if endpoint.protocol == "openai" else _sglang_slots)(body, length, window)
        tops = []
        for i, (raw, where) in enumerate(slots):
            position = length - window + i
            if raw is None:
                raise http.error(f"POST {path} answered null at {where}, the distribution at prompt position "
                                 f"{position} (window entry {i} of {window}) that the window needs")
            top = _ranked(_entries(raw, where, endpoint.protocol))
            if len(top) < logprobs:
                raise http.error(f"POST {path} returned {len(top)} top logprobs at prompt position {position} "
                                 f"(window entry {i} of {window}), asked {logprobs} (the server may cap them, "
                                 f"e.g. vLLM --max-logprobs; or two top tokens have the same text)")
            tops.append(top)
    except _Count as err:
        raise http.error(f"POST {path} {err}") from None
    except Malformed as err:
        raise http.error(f"POST {path} answered a body that {err}") from None
    return tops


def prompt_windows(endpoint: Endpoint, prompts: Mapping[str, list[int]] | Iterable[tuple[str, list[int]]],
                   window: int, logprobs: int, *, concurrency: int = 4, options: HttpOptions | None = None,
                   transport: httpx.BaseTransport | None = None) -> Iterator[tuple[str, Window]]:
    """`prompt_window` for each (key, token ids), at most `concurrency` at once over one client; yields
    (key, window) as each finishes, as `complete_many` does (lazy prompts, no prompt started after the
    first failure, whose error is raised once those in flight are yielded). ValueError at the call for
    a bad count, window or concurrency; when reached, for a bad prompt, one shorter than the window or
    a key given twice."""
    _check_counts(1, logprobs)
    _check_window(window)
    check_concurrency(concurrency)
    items = prompts.items() if isinstance(prompts, Mapping) else prompts

    def check(token_ids: list[int]) -> None:
        _check_token_ids(token_ids)
        _check_window(window, len(token_ids))

    def call(endpoint: Endpoint, token_ids: list[int], http: Http) -> Window:
        return prompt_window(endpoint, token_ids, window, logprobs, http)

    return run_many(endpoint, items, call, check, concurrency, options, transport)


__all__ = ["EndpointError", "Window", "prompt_window", "prompt_windows", "window_body"]
