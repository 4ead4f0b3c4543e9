"""The gate over every position of one forward (`glmcheck.checks.positions`): is a row's next-token distribution
further from the exact reference than the band's, at more positions than the band's own variants are?

The band here is per position: the KL of each ideal variant (`band:0`..) at each position t. A legitimate kernel is
one more such variant, so at position t its KL lies among theirs, except where a discrete decision flips (an
expert routing or a top-k near tie: one variant, or the row, moves a lot at one position and its successors). A
fault moves many positions (every token it touches, and through the later layers the positions after them). So
the gate counts positions:

- **exceedance**: the fraction of positions t where KL_row(t) > POSITION_RATIO x max(the band's envelope at t: its
  largest KL over positions t - NEIGHBOURS .. t + NEIGHBOURS, the band's floor), the floor being the median over the
  band of each variant's median KL (positions where every variant happens to sit near 0 allow the typical level, not 0).
  A row FAILS when more than EXCEED_LIMIT of its positions plus EXCEED_SLACK are beyond: a legitimate row's flips touch
  a few positions, a fault's effects many; the slack keeps one flip's run of positions from failing a short bin of the
  length sweep.
- **median**: the row's median KL over positions at most 1 + max(MEDIAN_SYSTEMATIC, MEDIAN_SAMPLING / sqrt(T)) x
  the band's largest median (T positions; the second term the median's sampling error, which a bin of the sweep
  or a short prompt has): a fault that moves every position a little (an output scale) raises the median though
  no single position stands out.

Both are fractions or quantiles of the positions, so the limits hold from 256 positions to 4096 and more. The limits
are measured (docs/reliability.md, "All-position logits"): false alarms over the legitimate rows (the kernel under
test, its unions, held-out band variants) and detection of the planted faults, over seeds.

The band cannot judge (INCONCLUSIVE, the rules of `glmcheck.checks.band`) with fewer than MIN_BAND variants, or
when every variant's KL is 0 at every position (zero width). A row with a NaN KL (a non-finite logit) FAILS.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from glmcheck.checks.band import FAIL, INCONCLUSIVE, MIN_BAND, PASS
from glmcheck.checks.positions import PositionStatistics

POSITION_RATIO = 2.0  # a position is "beyond the band" above this multiple of the band's envelope there
NEIGHBOURS = 2        # the envelope at t: the band's largest KL over positions t - 2 .. t + 2
EXCEED_LIMIT = 0.012  # the share of positions beyond the band a row may have ...
EXCEED_SLACK = 2      # ... plus this many (one discrete flip's run of positions, which weighs in a short bin)
MEDIAN_SYSTEMATIC = 0.25  # the row's median KL may exceed the band's largest median by this share ...
MEDIAN_SAMPLING = 8.0     # ... or by this / sqrt(positions), the median's sampling error, when larger


@dataclass(frozen=True)
class PositionBand:
    """The band's per-position distances: distance [N variants, T] fp64 (host), and the names of its variants."""

    distance: torch.Tensor
    names: tuple[str, ...]

    @classmethod
    def of(cls, samples: list[PositionStatistics], names: list[str]) -> PositionBand:
        if not samples:
            return cls(torch.zeros(0, 0, dtype=torch.float64), tuple(names))
        return cls(torch.stack([s.distance.double() for s in samples]), tuple(names))

    def window(self, start: int, stop: int) -> PositionBand:
        return PositionBand(self.distance[:, start:stop], self.names)

    def medians(self) -> list[float]:
        return self.distance.median(dim=1).values.tolist() if self.distance.numel() else []

    def floor(self) -> float:
        medians = self.medians()
        return statistics.median(medians) if medians else math.nan

    def allowed(self, ratio: float = POSITION_RATIO, neighbours: int = NEIGHBOURS) -> torch.Tensor:
        """[T]: the KL a legitimate row may reach at each position: `ratio` x the band's envelope (its largest KL
        over the `neighbours` positions on each side: neighbouring positions share their context, so the level a
        legitimate variant reaches at t it reaches near t), at least `ratio` x the floor."""
        envelope = self.distance.max(dim=0).values
        if neighbours and envelope.numel():
            envelope = torch.nn.functional.max_pool1d(envelope[None, None], 2 * neighbours + 1, stride=1,
                                                      padding=neighbours)[0, 0]
        return ratio * torch.clamp_min(envelope, self.floor())

    def unfit(self) -> tuple[str, str]:
        """(kind, why) the band cannot judge, or ("", "")."""
        variants = self.distance.shape[0]
        if variants < MIN_BAND:
            return "few", (f"a band of {variants} ideal variant{'s' if variants != 1 else ''} cannot judge: a gate "
                           f"needs at least {MIN_BAND} (--band)")
        if not bool(torch.isfinite(self.distance).all()):
            return "nonfinite", "a band sample gave a non-finite KL"
        if self.distance.numel() and float(self.distance.max()) == 0.0:
            return "zero", ("band of zero width: every variant equals the reference at every position, so no gate "
                            "can be built on it")
        return "", ""


@dataclass(frozen=True)
class PositionGate:
    """The all-position verdict rule (module docstring)."""

    position_ratio: float = POSITION_RATIO
    neighbours: int = NEIGHBOURS
    exceed_limit: float = EXCEED_LIMIT
    exceed_slack: int = EXCEED_SLACK
    median_systematic: float = MEDIAN_SYSTEMATIC
    median_sampling: float = MEDIAN_SAMPLING

    def allowed_beyond(self, positions: int) -> float:
        """How many of `positions` may lie beyond the band."""
        return self.exceed_limit * positions + self.exceed_slack

    def median_limit(self, positions: int) -> float:
        """The largest row median / band's largest median allowed over `positions`."""
        return 1 + max(self.median_systematic, self.median_sampling / math.sqrt(max(positions, 1)))

    def measure(self, row: PositionStatistics, band: PositionBand) -> dict[str, float]:
        """exceed (fraction of positions beyond the band), median_kl, band_median_max, and the margin (the larger of
        exceed / limit and median ratio / its limit; > 1 fails)."""
        kl = row.distance.double()
        if kl.numel() == 0 or band.distance.shape[-1] != kl.numel():
            raise ValueError(f"a row of {kl.numel()} positions against a band of {band.distance.shape[-1]}")
        beyond = int((~(kl <= band.allowed(self.position_ratio, self.neighbours))).sum())  # NaN counts beyond
        median = float(kl.median()) if bool(torch.isfinite(kl).all()) else math.nan
        band_median = max(band.medians())
        median_ratio = median / band_median if band_median > 0 else (math.inf if median > 0 else 0.0)
        margin = max(beyond / self.allowed_beyond(kl.numel()), median_ratio / self.median_limit(kl.numel()))
        return {"exceed": beyond / kl.numel(), "beyond": beyond, "median_kl": median, "band_median_max": band_median,
                "median_ratio": median_ratio, "margin": margin if math.isfinite(median) else math.inf}

    def judge(self, row: PositionStatistics, band: PositionBand) -> tuple[str, str, dict[str, float]]:
        """(verdict, why, measures) of a row beside the band."""
        measures = self.measure(row, band)
        if not math.isfinite(measures["median_kl"]):
            return FAIL, "non-finite logits", measures
        why = []
        allowed = self.allowed_beyond(row.distance.numel())
        if measures["beyond"] > allowed:
            why.append(f"{measures['beyond']} of {row.distance.numel()} positions ({measures['exceed']:.1%}) beyond "
                       f"{self.position_ratio:g} x the band's KL there (at most {allowed:.3g})")
        limit = self.median_limit(row.distance.numel())
        if measures["median_ratio"] > limit:
            why.append(f"median KL {measures['median_kl']:.2e} > {limit:.3g} x the band's largest median "
                       f"{measures['band_median_max']:.2e}")
        verdict = FAIL if why else PASS
        kind, unfit = band.unfit()
        if kind in ("few", "zero"):
            return INCONCLUSIVE, unfit + f" (the gate alone: {verdict})", measures
        if kind:
            return FAIL, unfit, measures
        return verdict, "; ".join(why), measures

    def describe(self) -> str:
        return (f"PASS when at most {self.exceed_limit:.1%} of positions + {self.exceed_slack} have a KL(reference || "
                f"row) above {self.position_ratio:g} x the band's largest KL within {self.neighbours} positions (at "
                f"least its typical median), and the row's median KL is at most 1 + max({self.median_systematic:g}, "
                f"{self.median_sampling:g} / sqrt(positions)) x the band's largest median; "
                f"non-finite logits FAIL; INCONCLUSIVE with fewer than {MIN_BAND} band variants or a band of zero "
                f"width")
