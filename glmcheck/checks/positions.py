"""Statistics over every position of one forward: how far a row's next-token distributions are from the exact
reference's, position by position, and their summary.

A causal model's forward over T tokens gives the next-token distribution at every position, and DSA's indexer
selects among positions <= t, so position t's distribution depends on tokens 0..t alone: one forward holds T
samples of the question "does this kernel change the model's output?", not one. As llama.cpp's KL-divergence tool
scores every token of a corpus, `position_statistics` gives per position (fp64, where the logits are, in chunks of
positions so a [T, vocab] fp64 copy never exists whole):

- `distance[t]` = KL(reference || row) over the full vocabulary, in nats (from a server's top-k lists, which
  cannot give KL: the mean |dlogprob| over the reference's top-k, `listed_position_statistics`);
- `same_top[t]` whether the row's most likely token is the reference's;
- `dlogprob[t]` = |logprob_row(x) - logprob_ref(x)| of the reference's most likely token x;
- given the text's tokens, `next_logprob[t]` / `ref_next_logprob[t]`: each side's logprob of the token that follows
  position t in the text (NaN at the last position), what llama.cpp's `--kl-divergence` report builds on.

`summarize` reduces them: the mean KL with a 95 % interval from a circular block bootstrap (neighbouring positions
share most of their context, so they are not independent samples: blocks keep that correlation), the median, the
99th and 99.9th percentiles and the maximum, the same-top rate and the mean |dlogprob|; with the text's tokens also
llama.cpp's figures (`llama_figures`): each side's perplexity, ln(PPL(row) / PPL(ref)) with a 95 % interval (the
same block bootstrap) and Δp, the row's probability of the text's next token minus the reference's (mean with its
interval, the 1st, 50th and 99th percentiles). `mean_above(kl, threshold)`
is the tail statistic the gate judges (`glmcheck.checks.position_gate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from glmcheck.process.phases import CLOCK

CHUNK_ELEMENTS = 2**24  # logits elements read as fp64 at once (128 MiB a tensor)
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 2026


@dataclass(frozen=True)
class PositionStatistics:
    """Per-position comparison of a row with the exact reference, on the host: distance, dlogprob [T] fp64,
    same_top [T] bool. `measure` names the distance: "kl" (KL(reference || row) over the full vocabulary, in
    process) or "topk_dlogprob" (a server's top-k: `listed_position_statistics`)."""

    distance: torch.Tensor
    same_top: torch.Tensor
    dlogprob: torch.Tensor
    measure: str = "kl"
    next_logprob: torch.Tensor | None = None  # [T] the row's logprob of the text's next token (NaN: none)
    ref_next_logprob: torch.Tensor | None = None  # [T] the reference's

    def __len__(self) -> int:
        return self.distance.numel()

    def window(self, start: int, stop: int) -> PositionStatistics:
        """Positions start..stop-1 (a bin of the length sweep)."""
        cut = lambda t: None if t is None else t[start:stop]  # noqa: E731
        return PositionStatistics(self.distance[start:stop], self.same_top[start:stop], self.dlogprob[start:stop],
                                  self.measure, cut(self.next_logprob), cut(self.ref_next_logprob))


def position_statistics(row: torch.Tensor, reference: torch.Tensor,
                        next_tokens: torch.Tensor | None = None) -> PositionStatistics:
    """Compare logits `row` with `reference` ([T, vocab] or [1, T, vocab], any float dtype, same shape) at every
    position; fp64 on the reference's device, the [T] results brought to the host once. A non-finite logit makes
    that position's kl and dlogprob NaN (never a small number). `next_tokens` [T] (ids; -1 where no token follows):
    the text's next token at each position, for each side's logprob of it."""
    if row.shape != reference.shape:
        raise ValueError(f"row and reference logits must have the same shape, got {tuple(row.shape)} and "
                         f"{tuple(reference.shape)}")
    with CLOCK.phase("compare"):
        row, reference = row.reshape(-1, row.shape[-1]), reference.reshape(-1, reference.shape[-1])
        positions, vocab = reference.shape
        step = max(1, CHUNK_ELEMENTS // max(vocab, 1))
        kl, same, dlogprob, nexts = [], [], [], []
        following = None if next_tokens is None else next_tokens.reshape(-1).to(reference.device, torch.long)
        for start in range(0, positions, step):
            ref = torch.log_softmax(reference[start:start + step].to(reference.device, torch.float64), dim=-1)
            mine = torch.log_softmax(row[start:start + step].to(reference.device, torch.float64), dim=-1)
            finite = torch.isfinite(ref).all(dim=-1) & torch.isfinite(mine).all(dim=-1)
            per_kl = (ref.exp() * (ref - mine)).sum(dim=-1)
            top = ref.argmax(dim=-1, keepdim=True)
            per_d = (mine.gather(-1, top) - ref.gather(-1, top)).abs().squeeze(-1)
            kl.append(torch.where(finite, per_kl.clamp_min(0.0), math.nan))
            dlogprob.append(torch.where(finite, per_d, math.nan))
            same.append((mine.argmax(dim=-1) == top.squeeze(-1)) & finite)
            if following is not None:
                after = following[start:start + step]
                has = after >= 0
                at = after.clamp_min(0)[:, None]
                nexts.append(torch.stack([torch.where(has, mine.gather(-1, at).squeeze(-1), math.nan),
                                          torch.where(has, ref.gather(-1, at).squeeze(-1), math.nan)]))
        if not kl:
            empty = torch.zeros(0, dtype=torch.float64)
            return PositionStatistics(empty, torch.zeros(0, dtype=torch.bool), empty)
        packed = torch.stack([torch.cat(kl), torch.cat(dlogprob), torch.cat(same).double()]
                             + (list(torch.cat(nexts, dim=1)) if nexts else [])).cpu()
    if nexts:
        return PositionStatistics(packed[0], packed[2].bool(), packed[1], "kl", packed[3], packed[4])
    return PositionStatistics(packed[0], packed[2].bool(), packed[1], "kl")


def listed_position_statistics(row: list, reference: list, k: int) -> PositionStatistics:
    """The same comparison from what a server lists (`glmcheck.checks.distributions.TopKDistribution`, one per
    position, oldest first): KL needs the whole vocabulary, so the distance at a position is `topk_distance`, the
    mean |dlogprob| over the reference's k most likely tokens (a token the row does not list counts at its floor);
    same_top compares the two lists' first tokens; dlogprob is that of the reference's first token. ValueError when
    the two give different numbers of positions."""
    from glmcheck.checks.distributions import topk_distance

    if len(row) != len(reference):
        raise ValueError(f"a row gave {len(row)} positions where the reference gave {len(reference)}")
    distance, same, dlogprob = [], [], []
    for mine, ref in zip(row, reference):
        distance.append(topk_distance(mine, ref, k)[0])
        top_ref, top_mine = ref.top(1), mine.top(1)
        same.append(bool(top_ref) and bool(top_mine) and top_ref[0][0] == top_mine[0][0])
        if top_ref:
            listed = mine.logprob_of(top_ref[0][0])
            dlogprob.append(abs((mine.floor() if listed is None else listed) - top_ref[0][1]))
        else:
            dlogprob.append(math.nan)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.float64)  # noqa: E731
    return PositionStatistics(as_tensor(distance), torch.tensor(same, dtype=torch.bool), as_tensor(dlogprob),
                              "topk_dlogprob")


def block_length(positions: int) -> int:
    """The bootstrap's block: about the cube root of the positions (the usual rate for a mean), at least 1."""
    return max(1, round(positions ** (1 / 3)))


def block_bootstrap_interval(values: torch.Tensor, *, block: int | None = None, resamples: int = BOOTSTRAP_RESAMPLES,
                             seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> tuple[float, float]:
    """A `level` interval of the mean of `values` [T] from a circular block bootstrap (blocks of `block`
    consecutive positions, wrapping at the end; T / block blocks a resample). NaN, NaN for no values or a NaN."""
    values = values.double().flatten()
    count = values.numel()
    if count == 0 or not bool(torch.isfinite(values).all()):
        return math.nan, math.nan
    block = block or block_length(count)
    blocks = max(1, math.ceil(count / block))
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, count, (resamples, blocks), generator=g)
    picks = (starts[..., None] + torch.arange(block)) % count
    means = values[picks.reshape(resamples, -1)[:, :count]].mean(dim=1)
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return low, high


def mean_above(kl: torch.Tensor, fraction: float) -> float:
    """The mean of the largest `fraction` of the values (at least one): the tail a fault on few positions raises,
    steadier than one percentile. NaN for no values or a NaN among them."""
    kl = kl.double().flatten()
    if kl.numel() == 0 or not bool(torch.isfinite(kl).all()):
        return math.nan
    count = max(1, math.ceil(fraction * kl.numel()))
    return float(torch.topk(kl, count).values.mean())


TAIL_FRACTION = 0.01  # the tail statistic: the mean of the largest 1 % of the positions' KL


def summarize(stats: PositionStatistics) -> dict[str, float]:
    """The summary of one row's per-position statistics (module docstring); NaN statistics when any position
    is NaN (a non-finite logit: the row FAILS)."""
    kl = stats.distance
    count = kl.numel()
    finite = count > 0 and bool(torch.isfinite(kl).all())
    if not finite:
        nan = math.nan
        return {"positions": count, "mean_kl": nan, "mean_kl_low": nan, "mean_kl_high": nan, "kl_p50": nan,
                "kl_p99": nan, "kl_p999": nan, "kl_max": nan, "tail_kl": nan,
                "same_top": float(stats.same_top.double().mean()) if count else nan, "mean_dlogprob": nan}
    low, high = block_bootstrap_interval(kl)
    p50, p99, p999 = torch.quantile(kl, torch.tensor([0.5, 0.99, 0.999], dtype=torch.float64)).tolist()
    return {"positions": count, "mean_kl": float(kl.mean()), "mean_kl_low": low, "mean_kl_high": high,
            "kl_p50": p50, "kl_p99": p99, "kl_p999": p999, "kl_max": float(kl.max()),
            "tail_kl": mean_above(kl, TAIL_FRACTION), "same_top": float(stats.same_top.double().mean()),
            "mean_dlogprob": float(stats.dlogprob.mean()), **llama_figures(stats)}


LLAMA_KEYS = ("ppl", "ppl_ref", "ln_ppl_ratio", "ln_ppl_ratio_low", "ln_ppl_ratio_high", "dp_mean", "dp_low",
              "dp_high", "dp_p01", "dp_p50", "dp_p99")


def llama_figures(stats: PositionStatistics) -> dict[str, float]:
    """llama.cpp's `--kl-divergence` figures over the positions a text token follows (module docstring): {} without
    the text's tokens, NaN ones when a logprob is not finite. Probabilities (Δp) as fractions, not percent."""
    if stats.next_logprob is None or stats.ref_next_logprob is None:
        return {}
    has = ~torch.isnan(stats.ref_next_logprob)
    mine, ref = stats.next_logprob[has].double(), stats.ref_next_logprob[has].double()
    if mine.numel() == 0 or not bool(torch.isfinite(mine).all() and torch.isfinite(ref).all()):
        return dict.fromkeys(LLAMA_KEYS, math.nan)
    ratio, dp = ref - mine, mine.exp() - ref.exp()  # ln PPL(row) - ln PPL(ref) per position; Δp
    ratio_low, ratio_high = block_bootstrap_interval(ratio)
    dp_low, dp_high = block_bootstrap_interval(dp)
    p01, p50, p99 = torch.quantile(dp, torch.tensor([0.01, 0.5, 0.99], dtype=torch.float64)).tolist()
    return {"ppl": math.exp(-float(mine.mean())), "ppl_ref": math.exp(-float(ref.mean())),
            "ln_ppl_ratio": float(ratio.mean()), "ln_ppl_ratio_low": ratio_low, "ln_ppl_ratio_high": ratio_high,
            "dp_mean": float(dp.mean()), "dp_low": dp_low, "dp_high": dp_high, "dp_p01": p01, "dp_p50": p50,
            "dp_p99": p99}
