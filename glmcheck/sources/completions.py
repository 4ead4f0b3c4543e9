"""Greedy completions with top-k logprobs from a running server, both protocols normalised to one
`Completion`.

- `openai`: `POST /v1/completions` with {"model", "prompt", "max_tokens", "temperature": 0,
  "logprobs": k, "echo": false}; read `choices[0].text` and `choices[0].logprobs`: `tokens`,
  `token_logprobs` and `top_logprobs` (per generated position, {token string: logprob}; a server
  may add the generated token to the k, so k or k + 1 entries).
- `sglang`: `POST /generate` with {"text" or "input_ids", "sampling_params": {"max_new_tokens",
  "temperature": 0}, "return_logprob": true, "top_logprobs_num": k, "return_text_in_logprobs":
  true}; read `text` and `meta_info.output_token_logprobs` ([logprob, token id, text] per
  generated token) and `meta_info.output_top_logprobs` (per position, a list of those).

Tokens are keyed by their text, the one key both protocols give. Logprobs are natural logs (nats).
`ignore_eos` (default on; vLLM and SGLang accept it) makes the server generate exactly `max_tokens`.
A server that returns another number of tokens (fewer are accepted only without `ignore_eos` and
with finish_reason "stop": an end of sequence), fewer than k top logprobs at a position, or a body
missing a field raises EndpointError.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from glmcheck.sources.endpoint import Endpoint, describe
from glmcheck.sources.transport import EndpointError, Http, HttpOptions, run_bounded

if TYPE_CHECKING:
    import httpx

Prompt = str | list[int]  # text, or token ids
TopEntry = tuple[str, float]  # (token text, logprob in nats)
PATHS = {"openai": "/v1/completions", "sglang": "/generate"}
NUMBER = (int, float)
P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True)
class NextToken:
    """The distribution at one generated position, as far as the top-k shows it."""

    token: str  # the most likely token (top-1 of the server's logprobs)
    logprob: float  # its logprob (nats)
    second: str | None  # the runner-up (None when k = 1)
    gap: float  # logprob(top-1) - logprob(top-2), nats (NaN when k = 1)
    generated: str  # the token the server generated here (the top-1 unless a tie or a server quirk)
    top: tuple[TopEntry, ...]  # most likely first; k or more entries
    k: int  # top-k asked

    def logprob_of(self, token: str) -> tuple[float | None, float]:
        """(logprob of `token` when it is listed, else None; the k-th largest logprob, an upper bound
        on the logprob of any token not listed)."""
        bound = self.top[self.k - 1][1]
        return next((lp for text, lp in self.top if text == token), None), bound


@dataclass(frozen=True)
class Completion:
    """A server's greedy continuation of one prompt. Per generated position: the token's text, its
    logprob (nats) and the top-k (most likely first; ties keep the server's order)."""

    endpoint: str  # endpoint name
    model: str | None  # as the server named it in the answer (None: it did not say)
    text: str  # the generated text
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[TopEntry, ...], ...]
    k: int  # top-k asked (each position has at least k entries)
    token_ids: tuple[int, ...] | None = None  # when the server gives them (sglang)
    finish_reason: str | None = None

    def next_token(self, position: int = 0) -> NextToken:
        """The `NextToken` view of generated position `position` (0: the prompt's next token)."""
        if not 0 <= position < len(self.tokens):
            raise ValueError(f"position must be in [0, {len(self.tokens)}) (tokens generated), got {position}")
        top = self.top[position]
        second = top[1] if len(top) > 1 and self.k > 1 else None
        gap = top[0][1] - second[1] if second is not None else math.nan
        return NextToken(top[0][0], top[0][1], second[0] if second else None, gap, self.tokens[position], top,
                         self.k)

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (`from_record` reads it back): for per-prompt progress files."""
        return {"endpoint": self.endpoint, "model": self.model, "text": self.text, "tokens": list(self.tokens),
                "logprobs": list(self.logprobs), "top": [[list(e) for e in pos] for pos in self.top],
                "k": self.k, "token_ids": list(self.token_ids) if self.token_ids is not None else None,
                "finish_reason": self.finish_reason}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Completion:
        """The Completion `to_record` wrote (ValueError naming the field when one is missing)."""
        try:
            ids = record["token_ids"]
            return cls(record["endpoint"], record["model"], record["text"], tuple(record["tokens"]),
                       tuple(float(x) for x in record["logprobs"]),
                       tuple(tuple((str(t), float(lp)) for t, lp in pos) for pos in record["top"]),
                       int(record["k"]), tuple(ids) if ids is not None else None, record["finish_reason"])
        except KeyError as err:
            raise ValueError(f"a completion record needs the field {err.args[0]!r}") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"a completion record is malformed ({err})") from None


class Malformed(Exception):
    """A response lacks a field or has one of the wrong type (message: which, and what was expected)."""


def _get(obj: Any, key: str | int, where: str, kind: type | tuple[type, ...]) -> Any:
    """obj[key], required to be of `kind`; Malformed naming `where` otherwise."""
    try:
        value = obj[key]
    except (KeyError, IndexError, TypeError):
        raise Malformed(f"has no {where}") from None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        got = "null" if value is None else type(value).__name__
        raise Malformed(f"has {where} of type {got}, expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if kind == NUMBER:
        return "a number"
    names = {str: "a string", list: "a list", dict: "an object", int: "an integer", float: "a number"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _ranked(entries: list[TopEntry]) -> tuple[TopEntry, ...]:
    """Most likely first; ties keep the server's order; NaN logprobs last."""
    return tuple(sorted(entries, key=lambda e: (math.isnan(e[1]), -e[1] if not math.isnan(e[1]) else 0.0)))


def request_body(protocol: str, model: str | None, prompt: Prompt, max_tokens: int, logprobs: int,
                 ignore_eos: bool = True) -> dict[str, Any]:
    """The JSON body of one greedy completion request (see the module docstring)."""
    if protocol == "openai":
        body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                "logprobs": logprobs, "echo": False}
        if ignore_eos:
            body["ignore_eos"] = True
        return body
    sampling: dict[str, Any] = {"max_new_tokens": max_tokens, "temperature": 0}
    if ignore_eos:
        sampling["ignore_eos"] = True
    return {"text" if isinstance(prompt, str) else "input_ids": prompt, "sampling_params": sampling,
            "return_logprob": True, "top_logprobs_num": logprobs, "return_text_in_logprobs": True}


def parse_openai(body: Any, endpoint: str, k: int) -> Completion:
    """A /v1/completions answer as a Completion (Malformed when a field is missing)."""
    choice = _get(_get(body, "choices", "choices", list), 0, "choices[0]", dict)
    text = _get(choice, "text", "choices[0].text", str)
    logprobs = _get(choice, "logprobs", "choices[0].logprobs (the server returned no logprobs)", dict)
    where = "choices[0].logprobs."
    tokens = _get(logprobs, "tokens", where + "tokens", list)
    values = _get(logprobs, "token_logprobs", where + "token_logprobs", list)
    tops = _get(logprobs, "top_logprobs", where + "top_logprobs", list)
    if not len(tokens) == len(values) == len(tops):
        raise Malformed(f"has {len(tokens)} tokens, {len(values)} token_logprobs and {len(tops)} top_logprobs "
                        f"in choices[0].logprobs, expected as many of each")
    top = []
    for i, entry in enumerate(tops):
        entry = _get(tops, i, f"{where}top_logprobs[{i}]", dict)
        for lp in entry.values():
            if not isinstance(lp, NUMBER) or isinstance(lp, bool):
                raise Malformed(f"has a logprob that is not a number in {where}top_logprobs[{i}]")
        top.append(_ranked([(str(t), float(lp)) for t, lp in entry.items()]))
    return Completion(endpoint, body.get("model") if isinstance(body.get("model"), str) else None, text,
                      tuple(_get(tokens, i, f"{where}tokens[{i}]", str) for i in range(len(tokens))),
                      tuple(float(_get(values, i, f"{where}token_logprobs[{i}]", NUMBER)) for i in range(len(values))),
                      tuple(top), k, None, _finish(choice.get("finish_reason")))


def _triple(item: Any, where: str) -> tuple[float, int, str]:
    """One SGLang [logprob, token id, text] entry."""
    if not (isinstance(item, (list, tuple)) and len(item) == 3):
        raise Malformed(f"has {where} that is not [logprob, token_id, text]")
    lp = _get(item, 0, f"{where}[0] (logprob)", NUMBER)
    token = _get(item, 1, f"{where}[1] (token id)", int)
    text = _get(item, 2, f"{where}[2] (token text; the server ignored return_text_in_logprobs)", str)
    return float(lp), token, text


def parse_sglang(body: Any, endpoint: str, k: int) -> Completion:
    """A /generate answer as a Completion (Malformed when a field is missing)."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    meta = _get(body, "meta_info", "meta_info", dict)
    text = _get(body, "text", "text", str)
    outputs = _get(meta, "output_token_logprobs", "meta_info.output_token_logprobs (return_logprob ignored?)", list)
    tops = _get(meta, "output_top_logprobs", "meta_info.output_top_logprobs (top_logprobs_num ignored?)", list)
    if len(outputs) != len(tops):
        raise Malformed(f"has {len(outputs)} output_token_logprobs but {len(tops)} output_top_logprobs in "
                        f"meta_info, expected as many")
    chosen = [_triple(item, f"meta_info.output_token_logprobs[{i}]") for i, item in enumerate(outputs)]
    top = []
    for i in range(len(tops)):
        entries = _get(tops, i, f"meta_info.output_top_logprobs[{i}]", list)
        triples = [_triple(item, f"meta_info.output_top_logprobs[{i}][{j}]") for j, item in enumerate(entries)]
        top.append(_ranked([(t, lp) for lp, _, t in triples]))
    return Completion(endpoint, None, text, tuple(t for _, _, t in chosen), tuple(lp for lp, _, _ in chosen),
                      tuple(top), k, tuple(token for _, token, _ in chosen), _finish(meta.get("finish_reason")))


def _finish(reason: Any) -> str | None:
    """finish_reason as a string (SGLang gives {"type": "length", ...})."""
    if isinstance(reason, dict):
        reason = reason.get("type")
    return reason if isinstance(reason, str) else None


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt must be non-empty text or token ids, got ''")
        return
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                         for t in prompt)):
        raise ValueError(f"prompt must be text or a non-empty list of token ids (int >= 0), got "
                         f"{str(prompt)[:60]}")


def _check_counts(max_tokens: int, logprobs: int) -> None:
    for name, value in (("max_tokens", max_tokens), ("logprobs", logprobs)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def complete(endpoint: Endpoint, prompt: Prompt, max_tokens: int, logprobs: int, http: Http | None = None, *,
             ignore_eos: bool = True, options: HttpOptions | None = None,
             transport: httpx.BaseTransport | None = None) -> Completion:
    """Ask `endpoint` for `max_tokens` greedy tokens after `prompt` (text or token ids) with the top
    `logprobs` logprobs at each. An openai endpoint without a model asks the server first (pass
    `describe(...).endpoint` to skip that). `http` is a client to reuse (else one is opened for
    this call, with `options` and `transport`). EndpointError on any failure (module docstring)."""
    _check_prompt(prompt)
    _check_counts(max_tokens, logprobs)
    if http is None:
        with endpoint.connect(options, transport=transport) as own:
            return complete(endpoint, prompt, max_tokens, logprobs, own, ignore_eos=ignore_eos)
    if endpoint.protocol == "openai" and endpoint.model is None:
        endpoint = describe(endpoint, http).endpoint
    path = PATHS[endpoint.protocol]
    body = http.post(path, request_body(endpoint.protocol, endpoint.model, prompt, max_tokens, logprobs, ignore_eos))
    parse = parse_openai if endpoint.protocol == "openai" else parse_sglang
    try:
        completion = parse(body, endpoint.name, logprobs)
    except Malformed as err:
        raise http.error(f"POST {path} answered a body that {err}") from None
    stopped = not ignore_eos and completion.finish_reason == "stop" and 0 < len(completion.tokens) < max_tokens
    if len(completion.tokens) != max_tokens and not stopped:
        raise http.error(f"POST {path} returned {len(completion.tokens)} tokens, asked {max_tokens} (finish_reason "
                         f"{completion.finish_reason!r}; ignore_eos={ignore_eos})")
    for i, top in enumerate(completion.top):
        if len(top) < logprobs:
            raise http.error(f"POST {path} returned {len(top)} top logprobs at generated position {i}, asked "
                             f"{logprobs} (the server may cap them, e.g. vLLM --max-logprobs; or two top tokens "
                             f"have the same text)")
    return completion


def complete_many(endpoint: Endpoint, prompts: Mapping[str, Prompt] | Iterable[tuple[str, Prompt]],
                  max_tokens: int, logprobs: int, *, concurrency: int = 4, ignore_eos: bool = True,
                  options: HttpOptions | None = None, transport: httpx.BaseTransport | None = None
                  ) -> Iterator[tuple[str, Completion]]:
    """`complete` for each (key, prompt), at most `concurrency` at once over one client; yields (key,
    Completion) as each finishes, so a caller can save each (e.g. ItemStore.save(key,
    completion.to_record())) and skip saved keys when resuming. Prompts are read lazily. On the first
    failure no prompt is started; those in flight finish and are yielded, then its EndpointError is
    raised. ValueError (at the call for the counts, when reached for a prompt) on a bad count, a bad
    prompt or a key given twice."""
    _check_counts(max_tokens, logprobs)
    check_concurrency(concurrency)
    items = prompts.items() if isinstance(prompts, Mapping) else prompts

    def call(endpoint: Endpoint, prompt: Prompt, http: Http) -> Completion:
        return complete(endpoint, prompt, max_tokens, logprobs, http, ignore_eos=ignore_eos)

    return run_many(endpoint, items, call, _check_prompt, concurrency, options, transport)


def check_concurrency(concurrency: int) -> None:
    if not (isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1):
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")


def run_many(endpoint: Endpoint, items: Iterable[tuple[str, P]], call: Callable[[Endpoint, P, Http], R],
             check: Callable[[P], None], concurrency: int, options: HttpOptions | None,
             transport: httpx.BaseTransport | None) -> Iterator[tuple[str, R]]:
    """`call(endpoint, prompt, http)` for each (key, prompt) of `items`, `check(prompt)` first, at most
    `concurrency` at once over one client (an openai endpoint's model asked once); the loop of
    `complete_many` (see there), shared with `glmcheck.sources.window.prompt_windows`."""
    http = endpoint.connect(options, max_connections=concurrency, transport=transport)
    try:
        if endpoint.protocol == "openai" and endpoint.model is None:
            endpoint = replace(endpoint, model=describe(endpoint, http).model)
        seen: set[str] = set()

        def keyed() -> Iterator[tuple[str, P]]:
            for key, prompt in items:
                if key in seen:
                    raise ValueError(f"prompt key {key!r} is given twice; keys must differ")
                seen.add(key)
                check(prompt)
                yield key, prompt

        yield from run_bounded(lambda prompt: call(endpoint, prompt, http), keyed(), concurrency)
    finally:
        http.close()  # requests still running (the caller stopped early) fail at once, unretried


__all__ = ["Completion", "EndpointError", "NextToken", "Prompt", "TopEntry", "complete", "complete_many",
           "parse_openai", "parse_sglang", "request_body"]
