"""`glmcheck firsttoken`: the greedy first token of each prompt under each backend.

Per backend: argmax agreement with the exact reference n/N, mean and max |Δ logprob| of the
reference's top-1 token over every prompt (agreeing or not), and the disagreements with each
side's top-1 token, its logprob and the reference's top-1/top-2 gap (a near tie explains a flip).
The band rows (`glmcheck.checks.band`): the reference run twice and N ideal bf16 kernels
(`band:K`), i.e. the noise any bf16 kernel carries through the model. A backend passes when every
disagreement is a near tie and its mean |Δ logprob| <= gate_ratio x the band's largest mean (and
<= max_dlogprob when given: a cap that only makes the gate stricter). A near tie is a reference
gap <= max(tie_gap, gate_ratio x the band's largest |Δ logprob|): on a model whose top-1/top-2
gaps are as small as that noise (dummy weights), a flip across such a gap says nothing about the
kernel. A band whose largest mean |Δ logprob| exceeds SPREAD_LIMIT x its median, or that has fewer
than MIN_BAND variants, cannot judge (`glmcheck.checks.band`): a backend it would pass is
INCONCLUSIVE. A FAIL row's note says which gate failed. A NaN in the reference's or a band sample's
logits is bad input (BadReference); a backend under test that raises or breaks the kernel contract
(`KernelFault`), or a candidate server that answers non-finite logits, gives no answer on that prompt (an outcome
with `fault` set) and its row FAILS naming why, whatever the band. `continue_tokens` > 0 adds a greedy continuation
per prompt and backend, compared token by token with the reference's as vLLM's `check_logprobs_close` does, and
judged beside the band (`glmcheck.checks.continuation`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from glmcheck.backends.errors import KernelFault
from glmcheck.backends.names import band_names
from glmcheck.checks.band import (
    DEFAULT_BAND,
    FAIL,
    INCONCLUSIVE,
    INFO,
    JUDGES_NOTHING,
    PASS,
    ideal_kind,
    inconclusive_rule,
    spread_reason,
)
from glmcheck.checks.continuation import CONTINUE_TOP_K, Step, compare, is_wide
from glmcheck.checks.rows import cross_check_note, overall_of, require_finite
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.data.prompts import Prompt
from glmcheck.startup import compile_ahead

DEFAULT_TIE_GAP = 0.1  # nats: a flip across a smaller top-1/top-2 gap is a near tie


class Tokenizer(Protocol):
    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...
    def token_text(self, token: int) -> str: ...


@dataclass(frozen=True)
class Choice:
    """The greedy choice at one position: token, its logprob, and the runner-up."""

    token: int
    logprob: float
    second: int
    gap: float  # logprob(top-1) - logprob(top-2), nats


def choose(logits: torch.Tensor) -> tuple[Choice, torch.Tensor]:
    """Greedy choice from final logits [vocab] (fp64), with the log-softmax."""
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    top = torch.topk(logprobs, 2)
    first, second = int(top.indices[0]), int(top.indices[1])
    return Choice(first, float(top.values[0]), second, float(top.values[0] - top.values[1])), logprobs


@dataclass
class PromptOutcome:
    """One prompt under one backend, judged against the reference's first run."""

    prompt_id: str
    backend: str
    token: int
    logprob: float
    ref_token: int
    ref_logprob: float
    ref_gap: float
    agree: bool
    dlogprob: float  # |logprob of the reference's token here - the reference's| (nats)
    divergence: int | None = None  # first differing continuation position (None: identical)
    fault: str | None = None  # why this backend gave no answer (it raised, broke its contract, NaN from a server)
    divergence_mutual: bool | None = None  # each token within the other's top-k there (`checks.continuation`)
    divergence_gap: float | None = None  # the reference's logprob of its token minus of the row's there (nats)


NONFINITE_LOGITS = "gave non-finite logits (NaN/Inf)"  # a fault: the row names no token


def faulted(prompt_id: str, backend: str, ref_choice: Choice, reason: str) -> PromptOutcome:
    """The outcome of a backend that gave no answer on a prompt (`reason`): no token, NaN logprobs; a FAIL."""
    return PromptOutcome(prompt_id, backend, -1, math.nan, ref_choice.token, ref_choice.logprob, ref_choice.gap,
                         False, math.nan, fault=reason)


@dataclass
class FirstTokenResult:
    outcomes: list[PromptOutcome]
    summary_rows: list[dict]
    disagreements: list[dict]
    verdict: str
    facts: dict = field(default_factory=dict)


def _logits(model, ids: torch.Tensor, backend: str, options: SwapOptions, exact: str | None = None,
            prompt_id: str = "", calls: compile_ahead.CallSet | None = None) -> torch.Tensor:
    """Final logits under `backend`; with `exact` (a reference or band run) NaN/Inf is bad input (BadReference).
    `calls`: where the forward's backend calls are kept (`compile_ahead`)."""
    run = forward_under(model, ids, backend, options, record_calls=calls is not None)
    if calls is not None:
        calls.add(run.kernel_calls)
    logits = run.captured.logits[0, -1]
    if exact is not None:
        require_finite(model, logits, f"logits on prompt {prompt_id!r} ({ids.shape[1]} tokens)", backend, exact)
    return logits


def greedy_continuation(model, ids: torch.Tensor, backend: str, options: SwapOptions, steps: int,
                        progress=None) -> list[int]:
    """`steps` greedy tokens after `ids` [1, N] (each step re-runs the prefill; `progress` updated once a step)."""
    return [int(s.token) for s in greedy_steps(model, ids, backend, options, steps, progress)]


def greedy_steps(model, ids: torch.Tensor, backend: str, options: SwapOptions, steps: int,
                 progress=None) -> list[Step]:
    """`greedy_continuation` with each step's top CONTINUE_TOP_K (id, logprob) (`glmcheck.checks.continuation`)."""
    out: list[Step] = []
    current = ids
    for _ in range(steps):
        logits = _logits(model, current, backend, options)
        token = int(logits.argmax())
        logprobs = torch.log_softmax(logits.double(), dim=-1)
        values, indices = torch.topk(logprobs, min(CONTINUE_TOP_K, logprobs.numel()))
        if progress is not None:
            progress.update(1)
        out.append(Step(token, tuple(zip(indices.tolist(), values.tolist()))))
        current = torch.cat([current, torch.tensor([[token]], device=ids.device)], dim=1)
    return out


def judge_prompt(prompt_id: str, backend: str, logits: torch.Tensor, ref_choice: Choice) -> PromptOutcome:
    """Compare one backend's final logits with the reference's choice. It agrees when the reference's token is
    among its most likely (an exact tie at the top, common in bf16 logits, agrees whichever token a tie-break
    would pick, so in-process and server rows agree alike)."""
    choice, logprobs = choose(logits)
    mine = float(logprobs[ref_choice.token])
    dlogprob = abs(mine - ref_choice.logprob)
    return PromptOutcome(prompt_id, backend, choice.token, choice.logprob, ref_choice.token, ref_choice.logprob,
                         ref_choice.gap, choice.token == ref_choice.token or mine == choice.logprob, dlogprob)


def run_firsttoken(model, tokenizer: Tokenizer, prompts: list[Prompt], backends: list[str],
                   exact: str = "reference", options: SwapOptions = SwapOptions(), *, gate_ratio: float = 2.0,
                   max_dlogprob: float | None = None, tie_gap: float = DEFAULT_TIE_GAP,
                   band_size: int = DEFAULT_BAND, continue_tokens: int = 0, device: torch.device | str = "cpu",
                   on_prompt: Callable[[Prompt, list[PromptOutcome]], None] | None = None,
                   done: dict[str, list[PromptOutcome]] | None = None,
                   encoded: dict[str, list[int]] | None = None, progress=None) -> FirstTokenResult:
    """Run every prompt under the exact reference (twice), the band and each backend; judge (see
    module docstring). `done` maps prompt ids to outcomes already computed (a resumed run); those
    prompts are skipped. `on_prompt` is called after each newly computed prompt. `encoded` maps
    prompt ids to token ids to use instead of encoding the prompt's text (windows of a token stream).
    `progress` is updated once a forward (`forwards_per_prompt` of them a prompt). The reference's first forward
    runs over every prompt before the rest, so that the other backends' kernels compile in threads at once.
    Prompt ids must be unique."""
    ids_seen = [p.id for p in prompts]
    if len(set(ids_seen)) != len(ids_seen):
        raise ValueError(f"prompts must have unique ids, got {sorted({i for i in ids_seen if ids_seen.count(i) > 1})}")
    variants = band_names(band_size)
    others = [b for b in dict.fromkeys(backends) if b != exact and b not in variants]
    control_name = f"{exact} (rerun)"
    outcomes: list[PromptOutcome] = []

    def logits(ids: torch.Tensor, name: str, prompt_id: str, own: bool = True, calls=None) -> torch.Tensor:
        try:
            return _logits(model, ids, name, options, exact if own else None, prompt_id, calls)
        finally:
            if progress is not None:
                progress.update(1)

    # The reference's forward over every prompt first: its recorded calls hold every prompt shape the other
    # backends will meet, so their kernel variants compile at once, in threads (`compile_ahead`), not prompt by prompt.
    todo = [p for p in prompts if not (done and p.id in done)]
    calls = compile_ahead.CallSet() if compile_ahead.enabled(device) else None
    first: dict[str, tuple[torch.Tensor, Choice]] = {}  # prompt id -> (token ids, the reference's choice)
    for prompt in todo:
        tokens = encoded[prompt.id] if encoded and prompt.id in encoded else tokenizer.encode(prompt.prompt)
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        first[prompt.id] = (ids, choose(logits(ids, exact, prompt.id, calls=calls))[0])
    if calls is not None:
        compile_ahead.compile_ahead(calls.calls(), variants + others, deterministic=options.deterministic,
                                    kv_cache_dtype=options.kv_cache_dtype)
    for prompt in prompts:
        if prompt.id not in first:
            outcomes += done[prompt.id]
            continue
        ids, ref_choice = first.pop(prompt.id)
        ref_continuation = greedy_steps(model, ids, exact, options, continue_tokens, progress) \
            if continue_tokens else []
        batch = [judge_prompt(prompt.id, control_name, logits(ids, exact, prompt.id), ref_choice)]
        batch += [judge_prompt(prompt.id, name, logits(ids, name, prompt.id), ref_choice)
                  for name in variants]
        for name in others:
            try:
                mine_logits = logits(ids, name, prompt.id, own=False)
                fault = None if bool(torch.isfinite(mine_logits).all()) else NONFINITE_LOGITS
            except KernelFault as err:
                fault = err.reason
            if fault is not None:  # no answer: no token, no tie (its argmax over NaN would name an arbitrary token)
                batch.append(faulted(prompt.id, name, ref_choice, fault))
                if progress is not None:
                    progress.update(continue_tokens)  # the continuation it will not run
                continue
            outcome = judge_prompt(prompt.id, name, mine_logits, ref_choice)
            if continue_tokens:
                found = compare(greedy_steps(model, ids, name, options, continue_tokens, progress), ref_continuation)
                outcome.divergence, outcome.divergence_mutual, outcome.divergence_gap = \
                    found.position, found.mutual, found.gap
            batch.append(outcome)
        outcomes += batch
        if on_prompt is not None:
            on_prompt(prompt, batch)
    cross_checks = {name: cross_check_note(options) for name in others if name.startswith("hf_")}
    return summarize(outcomes, [control_name] + variants + others, control_name, tokenizer, gate_ratio,
                     max_dlogprob, tie_gap, continue_tokens, variants, cross_checks,
                     kv_cache_dtype=options.kv_cache_dtype)


def forwards_per_prompt(backends: list[str], exact: str, band_size: int, continue_tokens: int = 0) -> int:
    """The forwards `run_firsttoken` runs a prompt: the reference twice, the band, each other backend, and with a
    continuation one prefill a step for the reference and each other backend."""
    variants = band_names(band_size)
    others = [b for b in dict.fromkeys(backends) if b != exact and b not in variants]
    return 2 + band_size + len(others) + continue_tokens * (1 + len(others))


def summarize(outcomes: list[PromptOutcome], names: list[str], control_name: str, tokenizer: Tokenizer,
              gate_ratio: float, max_dlogprob: float | None, tie_gap: float, continue_tokens: int,
              noise_names: list[str] | tuple[str, ...] = (), not_judged: dict[str, str] | None = None,
              kv_cache_dtype: str | None = None) -> FirstTokenResult:
    """Per-backend summary rows, the disagreement list and the verdict (see module docstring).
    `not_judged` maps backends shown but not gated (hf cross-checks) to the reason; `kv_cache_dtype` names how the
    band's members read the cache in their labels (`band.ideal_kind`)."""
    reference = control_name.split(" ")[0]
    not_judged = not_judged or {}
    band = [_stats([o for o in outcomes if o.backend == name]) for name in [control_name, *noise_names]]
    band_mean = max(n["mean_dlogprob"] for n in band)
    near_tie = max([tie_gap] + [gate_ratio * n["max_dlogprob"] for n in band])
    unfit = _band_unfit(band, len(noise_names), gate_ratio)
    rows, flips = [], []
    for name in names:
        mine = [o for o in outcomes if o.backend == name]
        stats = _stats(mine)
        wide_flips = [o for o in mine if not o.agree and not o.fault and o.ref_gap > near_tie]
        wide_turns = [o for o in mine if not o.fault and is_wide(o.divergence_mutual, o.divergence_gap, near_tie)]
        is_band = name == control_name or name in noise_names
        faults = [o for o in mine if o.fault]
        if is_band or name in not_judged:
            verdict = INFO if math.isfinite(stats["mean_dlogprob"]) or name in not_judged else FAIL
            note = not_judged.get(name, "")
        elif faults:  # a backend that gave no answer FAILS whatever the band
            verdict, note = FAIL, f"{faults[0].fault} (on {len(faults)} of {len(mine)} prompts)"
        else:
            verdict, note = _judge(stats, wide_flips, gate_ratio * band_mean, max_dlogprob, near_tie, bool(mine),
                                   wide_turns)
            if (unfit[0] and verdict != FAIL) or (unfit[0] in JUDGES_NOTHING and "not finite" not in note):
                note = f"{unfit[1]} (the gate alone: {verdict}{': ' + note if note else ''})"
                verdict = INCONCLUSIVE
        if name == control_name:
            comparison = f"noise band: {reference} vs itself (rerun)"
        elif name in noise_names:
            comparison = f"noise band: {name} vs {reference} ({ideal_kind(name, kv_cache_dtype)})"
        else:
            comparison = f"{name} vs {reference}"
        row = {"comparison": comparison, "backend": name, **stats, "wide_flips": len(wide_flips),
               "verdict": verdict, "note": note}
        if continue_tokens:
            row["identical_continuations"] = sum(o.divergence is None for o in mine)
            row["outside_topk"] = sum(o.divergence_mutual is False for o in mine)
            row["wide_divergences"] = len(wide_turns)
        rows.append(row)
        flips += [_flip(o, tokenizer, near_tie) for o in mine if not o.agree and not o.fault]
    verdict = overall_of([r["verdict"] for r in rows])
    reference_runs = [o for o in outcomes if o.backend == control_name]
    facts = {"tie_gap": near_tie, "tie_gap_option": tie_gap, "band_mean_dlogprob": band_mean, "gate_ratio": gate_ratio,
             **reference_peakedness(reference_runs),
             "gate": f"PASS when every flip is a near tie (reference gap <= {near_tie:.4g} nats = max({tie_gap:g}, "
             f"{gate_ratio:g} x the band's max |dlogprob|)) and mean |dlogprob| over every prompt <= "
             f"{gate_ratio:g} x the band's max mean" + (f" and <= {max_dlogprob:g}" if max_dlogprob else "")
             + (f"; a greedy continuation of {continue_tokens} tokens may first differ from the reference's only where "
                f"each token is in the other's top-{CONTINUE_TOP_K} and the reference's gap between them is a near "
                f"tie" if continue_tokens else "")
             + "; a check with no backend judged FAILS; " + inconclusive_rule(),
             "continue_tokens": continue_tokens, "max_dlogprob": max_dlogprob}
    return FirstTokenResult(outcomes, rows, flips, verdict, facts)


def _judge(stats: dict, wide_flips: list[PromptOutcome], limit: float, cap: float | None, near_tie: float,
           any_prompt: bool, wide_turns: list[PromptOutcome] = ()) -> tuple[str, str]:
    """(PASS or FAIL, which gate failed) for one backend's statistics."""
    mean = stats["mean_dlogprob"]
    if not any_prompt:
        return FAIL, "no prompt judged"
    if not (math.isfinite(mean) and math.isfinite(near_tie)):
        return FAIL, "mean |dlogprob| not finite"
    reasons = []
    if wide_flips:
        ids = ", ".join(o.prompt_id for o in wide_flips[:3]) + (", ..." if len(wide_flips) > 3 else "")
        reasons.append(f"{len(wide_flips)} flip{'s' if len(wide_flips) > 1 else ''} beyond the tie gap "
                       f"{near_tie:.3g} nats ({ids})")
    if wide_turns:
        at = ", ".join(f"{o.prompt_id}@{o.divergence}" for o in wide_turns[:3]) + (", ..." if len(wide_turns) > 3
                                                                                   else "")
        reasons.append(f"{len(wide_turns)} continuation{'s' if len(wide_turns) > 1 else ''} diverging beyond a near "
                       f"tie or outside the other's top-{CONTINUE_TOP_K} ({at})")
    if not mean <= limit:
        reasons.append(f"mean |dlogprob| {mean:.3e} > {limit:.3e} (gate ratio x the band's max mean)")
    if cap is not None and not mean <= cap:
        reasons.append(f"mean |dlogprob| {mean:.3e} > cap {cap:g}")
    return (FAIL, "; ".join(reasons)) if reasons else (PASS, "")


def _band_unfit(band: list[dict], variants: int, ratio: float) -> tuple[str, str]:
    """(kind, why) the band's mean |dlogprob| cannot judge (`glmcheck.checks.band.spread_reason`): the statistic
    the gate multiplies. The tie gap rests on the band's largest single |dlogprob| but has a floor (--tie-gap)."""
    return spread_reason([n["mean_dlogprob"] for n in band if math.isfinite(n["mean_dlogprob"])], "mean_dlogprob",
                         variants, ratio)


def _stats(outcomes: list[PromptOutcome]) -> dict:
    """Agreement and |dlogprob| of the reference's top-1 token over every prompt (NaN if any is)."""
    deltas = [o.dlogprob for o in outcomes]
    finite = all(math.isfinite(o.logprob) and math.isfinite(o.dlogprob) for o in outcomes)
    mean = sum(deltas) / len(deltas) if deltas else math.nan
    return {"agree": sum(o.agree for o in outcomes), "prompts": len(outcomes),
            "mean_dlogprob": mean if finite else math.nan, "max_dlogprob": max(deltas, default=math.nan)
            if finite else math.nan}


def _flip(o: PromptOutcome, tokenizer: Tokenizer, tie_gap: float) -> dict:
    """A disagreement's entry; a row whose logprob is not finite names no token and no tie (None: shown as '-')."""
    finite = math.isfinite(o.logprob) and o.token >= 0
    return {"prompt_id": o.prompt_id, "backend": o.backend, "ref_token": tokenizer.token_text(o.ref_token),
            "ref_logprob": o.ref_logprob, "token": tokenizer.token_text(o.token) if finite else None,
            "logprob": o.logprob, "ref_gap": o.ref_gap, "near_tie": o.ref_gap <= tie_gap if finite else None}


def reference_peakedness(outcomes: list[PromptOutcome]) -> dict:
    """How peaked the reference's next-token distributions are over the prompts: median top-1
    probability and median top-1/top-2 gap (nats). A model that cannot speak has top-1 ~ 1/vocab."""
    if not outcomes:
        return {}
    probs = sorted(math.exp(o.ref_logprob) for o in outcomes)
    gaps = sorted(o.ref_gap for o in outcomes)
    return {"reference_median_top1_prob": statistics.median(probs), "reference_median_gap": statistics.median(gaps),
            "reference_top1_prob_at_least_0.3": sum(p >= 0.3 for p in probs) / len(probs)}
