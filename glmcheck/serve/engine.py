"""The server's forwards: greedy continuations and prompt logprobs under one backend, through the
harness (`glmcheck.checks.runner.forward_under`, the forward every in-process check runs).

There is no KV cache: each generated token re-runs the prefill of the whole sequence, as
`glmcheck.checks.firsttoken.greedy_continuation` does, so the tokens equal the in-process ones.
Logprobs are the fp64 log-softmax of the harness's fp64 copy of the logits; the greedy token is the
argmax of those logits (the first on a tie, as `greedy_continuation`). When the prompt is scored too,
one forward keeps the logits of the positions asked and the first token comes from its last row.
One forward runs at a time (`Served.lock`: the backend swap is not re-entrant).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.serve.codec import TokenCodec


class BackendFault(RuntimeError):
    """The backend produced non-finite logits or was not called: the server answers 500."""


class ServerStopping(RuntimeError):
    """The server is shutting down; a continuation in flight stops between forwards (503)."""


@dataclass(frozen=True)
class Scored:
    """One position: its token, that token's logprob (None for the first scored prompt token, which
    nothing before it predicts), the `top` most likely (id, logprob) there, most likely first, and the
    token's rank there (1: the most likely; 1 + the number of ids with a larger logprob; None with the
    logprob)."""

    token: int
    logprob: float | None
    top: tuple[tuple[int, float], ...] | None
    rank: int | None = None


@dataclass(frozen=True)
class Stop:
    """What ends a continuation before its length: a generated token in `token_ids`, or a stop
    string appearing in the generated text (cut before it, or after it when `keep_string`)."""

    strings: tuple[str, ...] = ()
    token_ids: frozenset[int] = frozenset()
    keep_string: bool = False


@dataclass
class Generation:
    """A prompt's scored positions (`prompt`, from the requested start; empty when none was asked),
    the generated tokens (`output`), their text (`text`), and why it ended: `finish` "length" or
    "stop", with `matched` the stop string or token id that ended it."""

    prompt: list[Scored]
    output: list[Scored]
    text: str
    finish: str = "length"
    matched: str | int | None = None
    seconds: float = 0.0  # wall time of its forwards


@dataclass
class Served:
    """A built model behind the API: the backend every forward runs under, the swap options, the
    served model name, the largest top-k a request may ask (`max_logprobs`), the model's positions,
    the checkpoint or preset served (`root`) and `info` (what `/glmcheck/info` reports).
    `generate` is thread-safe (one forward at a time)."""

    model: torch.nn.Module
    codec: TokenCodec
    backend: str
    options: SwapOptions
    name: str
    max_logprobs: int
    positions: int
    root: str = ""  # the checkpoint or preset the name stands for (`/v1/models`)
    info: dict = field(default_factory=dict)
    chat_template: str | None = None  # `--chat-template` (None: the tokenizer's own, if any)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    forwards: int = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        return self.codec.vocab_size

    def generate(self, ids: list[int], max_new: int, *, prompt_from: int | None = None, top: int = 0,
                 stop: Stop = Stop(), skip_special: bool = True,
                 on_token: Callable[[Generation], None] | None = None) -> Generation:
        """Up to `max_new` greedy tokens after `ids` (valid ids, checked by the caller), each with
        its logprob and `top` most likely alternatives. With `prompt_from` = s (0 <= s < len(ids))
        the prompt positions s.. are scored too: position s gets logprob None, position p > s the
        logprob of ids[p] given ids[:p]. BackendFault for non-finite logits or a backend that was
        never called; ServerStopping when the server shuts down between two forwards. `on_token` (streaming)
        is called with the generation so far (its `text` decoded up to the new token) after each token that
        does not end it; the returned generation is the final one."""
        with self.lock:
            start = time.perf_counter()
            result = self._generate(ids, max_new, prompt_from, top, stop, skip_special, on_token)
            result.seconds = time.perf_counter() - start
            return result

    def _generate(self, ids: list[int], max_new: int, prompt_from: int | None, top: int, stop: Stop,
                  skip_special: bool, on_token: Callable[[Generation], None] | None = None) -> Generation:
        """`generate` without the lock (see there)."""
        prompt: list[Scored] = []
        output: list[Scored] = []
        keep = len(ids) - prompt_from if prompt_from is not None and prompt_from < len(ids) - 1 else 0
        keep = keep or (1 if max_new else 0)
        rows = self._logits(ids, keep) if keep else None
        if prompt_from is not None:
            prompt.append(Scored(ids[prompt_from], None, None))
            first = len(ids) - keep  # the sequence position of rows[0]
            for position in range(prompt_from + 1, len(ids)):
                prompt.append(_score(rows[position - 1 - first], ids[position], top))
        current = list(ids)
        result = Generation(prompt, output, "")
        for step in range(max_new):
            row = rows[-1] if step == 0 else self._logits(current, 1)[-1]
            token = int(row.argmax())
            output.append(_score(row, token, top))
            current.append(token)
            if token in stop.token_ids:
                result.finish, result.matched = "stop", token
                break
            if stop.strings and _cut_at_stop(result, self.codec.decode(current[len(ids):], skip_special), stop):
                return result
            if on_token is not None and step + 1 < max_new:
                result.text = self.codec.decode(current[len(ids):], skip_special)
                on_token(result)
        result.text = self.codec.decode(current[len(ids):], skip_special)
        return result

    def _logits(self, ids: list[int], keep: int) -> torch.Tensor:
        """fp64 logits [keep, vocab] of the last `keep` positions of `ids`, under the backend."""
        if self.stopping.is_set():
            raise ServerStopping("the server is shutting down")
        run = forward_under(self.model, torch.tensor([ids], dtype=torch.long, device=self.device), self.backend,
                            self.options, last_logits=keep)
        self.forwards += 1
        expected, seen = run.missing_calls(self.model.config.num_hidden_layers, self.options.tp)
        if expected:
            raise BackendFault(f"backend {self.backend!r} ran {seen} of the {expected} kernel calls a forward "
                               f"needs (a silent no-op)")
        logits = run.captured.logits[0].double()
        if not bool(torch.isfinite(logits).all()):
            bad = int((~torch.isfinite(logits)).sum())
            raise BackendFault(f"backend {self.backend!r} produced non-finite logits: {bad} of {logits.numel()} "
                               f"values over the last {keep} positions of a {len(ids)}-token sequence")
        return logits


def _score(logits: torch.Tensor, token: int, top: int) -> Scored:
    """Logprob of `token` and the `top` most likely (id, logprob) under fp64 `logits` [vocab]."""
    logprobs = torch.log_softmax(logits, dim=-1)
    best = ()
    if top:
        values, indices = torch.topk(logprobs, top)
        best = tuple((int(i), float(v)) for i, v in zip(indices.tolist(), values.tolist()))
    chosen = logprobs[token]
    return Scored(token, float(chosen), best, 1 + int((logprobs > chosen).sum()))


def _cut_at_stop(result: Generation, text: str, stop: Stop) -> bool:
    """When a stop string occurs in `text`: cut `result.text` there (the earliest match), mark
    it stopped and return True."""
    hits = [(text.find(s), s) for s in stop.strings if s and s in text]
    if not hits:
        return False
    where, string = min(hits)
    result.text = text[:where + (len(string) if stop.keep_string else 0)]
    result.finish, result.matched = "stop", string
    return True
