"""The noise band a check judges its rows beside, and the gate over it.

A bf16 kernel cannot be closer to the exact answer than rounding allows, and through a model that
rounding is amplified by discrete decisions (expert routing, the indexer's top-k), so one sample
of it says little. The band is the same distance for several legitimate variants: the reference
rerun (0 where the stack is deterministic) and N ideal bf16-output kernels (`band:0`..`band:N-1`,
N <= 16, `glmcheck.backends.band_kernels`: flash-style online softmax that rounds P to bf16 against
the running max of KV blocks of 16, 32, 64 or 128 slots, taken forward or reversed, the normaliser
summing the fp32 or the rounded P), each against the exact reference. A row passes when each
statistic it is judged on lies within the band's largest value times the gate ratio:

- `rel_l2` (every check): ||actual - exact|| / ||exact||;
- `token_max_rel_l2` (layer0): the largest per-token rel-L2, so a fault in one token of many shows;
- `scale_bias` (layer0): the least-squares scale of actual on exact, minus 1, so an output scaled
  by 1.003 shows although its rel-L2 is within the band; it must lie within the band's range
  widened by that range and by 6 standard errors of the row's own estimate;
- `temperature_bias` (layer0): the least-squares coefficient of actual - exact on the exact output's
  derivative in the softmax scale's relative change (`glmcheck.checks.layer0`), so a softmax scale
  off by 0.1 % shows although its rel-L2 is within the band; judged as scale_bias is.

An absolute `cap` on rel-L2 can only fail a row. NaN/Inf fails. See docs/reliability.md, "Gate".

A band that cannot judge says so (`Band.unfit`, `spread_reason`): with fewer than MIN_BAND ideal
variants, with every sample 0 (zero width: a stack that reruns bit for bit, named as its own band), or when a judged
statistic's band max exceeds SPREAD_LIMIT x the band's median (some variants took a discrete top-k or routing flip the
others did not, and the gate's 2 x max admits the planted faults of `glmcheck.selftest.faults`), the rows are
INCONCLUSIVE: a row within so wide a gate is no PASS (one beyond it still FAILS), and a band too small or of zero width
decides neither way. The run exits 3 (`exit_code`). Both limits are measured (docs/reliability.md, "Gate"). A
non-finite exact reference or band sample is bad input (`BadReference`), never a kernel FAIL.
"""

from __future__ import annotations

import math
import numbers
import statistics
from dataclasses import dataclass, field

PASS, FAIL, INFO, INCONCLUSIVE = "PASS", "FAIL", "-", "INCONCLUSIVE"
REHEARSAL = "REHEARSAL"  # a rank rehearsal's report: no verdict (`glmcheck.evaluate.rehearsal`)
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3, REHEARSAL: 4}  # the CLI's codes; 2 is bad usage or input
DEFAULT_BAND = 4
# The sweep's band when none is asked for: 8 variants, not 4. Its six bins are six tests per row, and the positions a
# legitimate row has beyond a band of 4 reach the count limit in some bin of about one seed in two (ref-gpu, 32768
# tokens): docs/reliability.md, "The sweep's band".
SWEEP_BAND = 8
# Ideal variants a gate needs: a held-out variant against a band of 1 FAILS 8/96 (tiny logits) and 4/64 (ref-cpu
# logits) times, against 2 still 4/64 (ref-cpu, last layer's drift), against 3 or more never.
MIN_BAND = 3
# Band max / band median beyond which the band cannot judge: legitimate bands reach 2.6 (tiny and ref-cpu, 64 tokens),
# bands with a flip 4.65 and more; at the limit the gate admits 6 x the median (docs/reliability.md, "Gate"). The
# same limit on median / the smallest ideal variant finds a band where most variants flipped ("split").
SPREAD_LIMIT = 3.0
# --gate-ratio: below 1 the band's own max fails; above 4 the weakest planted fault the default gate catches (rope
# dropped, tiny's last-layer drift, at 4.7 x the band's median) passes.
GATE_RATIO_BOUNDS = (1.0, 4.0)
BIAS_SIGMAS = 6.0  # standard errors of a row's own scale estimate allowed beyond the band's range
BIAS_STATS = ("scale_bias", "temperature_bias")  # judged by a window around the band's range, not a ratio
RATIO_STATS = ("rel_l2", "token_max_rel_l2")
# Kinds of `spread_reason` under which no row is judged either way (every finite row INCONCLUSIVE): too few variants
# to build a gate on, or a band of zero width (a gate of 0 would fail every legitimate row, so a row beyond it says
# nothing either). Under the other kinds a row beyond even the wide gate still FAILS.
JUDGES_NOTHING = frozenset({"few", "zero"})


def ideal_kind(name: str, kv_cache_dtype: str | None) -> str:
    """How band member `name` ("band:K") reads the KV, for its row label: "ideal FP8 kernel" for odd K over an FP8
    cache (`band_kernels.fp8_band_variant`: scores from the e4m3 codes, the scale after the dot), otherwise "ideal
    bf16 kernel"."""
    fp8 = kv_cache_dtype == "fp8_e4m3" and name.startswith("band:") and int(name.split(":", 1)[1]) % 2 == 1
    return "ideal FP8 kernel" if fp8 else "ideal bf16 kernel"


def exit_code(verdict: str | None) -> int:
    """0 PASS, 3 INCONCLUSIVE, 4 REHEARSAL, 1 anything else (FAIL, or no verdict)."""
    return EXIT_CODES.get(verdict, 1)


def check_gate_ratio(value: object, option: str = "--gate-ratio") -> None:
    """ValueError naming `option` unless `value` is a number within GATE_RATIO_BOUNDS."""
    low, high = GATE_RATIO_BOUNDS
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low <= value <= high:
        raise ValueError(f"{option} must be a number in [{low:g}, {high:g}] (below 1 the band's own samples fail; "
                         f"above {high:g} the gate admits the planted faults), got {value!r}")


class BadReference(ValueError):
    """The exact reference or a band sample produced NaN/Inf: the weights or the prompt are bad input, not the
    kernel (the CLI prints it as one line, exit 2)."""


LABELS = {"rel_l2": "rel-L2", "token_max_rel_l2": "token max rel-L2", "mean_dlogprob": "mean |dlogprob|",
          "max_dlogprob": "max |dlogprob|"}


def spread_reason(values: list[float], stat: str, variants: int, ratio: float | None = None,
                  apart: float | None = None) -> tuple[str, str]:
    """(kind, why) a band's samples `values` of `stat` (the rerun first, then the `variants` ideal variants)
    cannot judge: "few" (fewer than MIN_BAND ideal variants beside the rerun), "wide" (max > SPREAD_LIMIT x
    median: a minority of the samples took a discrete flip; `ratio`, the gate's, to say what it would admit),
    "zero" (every sample is 0: a stack that reruns bit for bit, its instances named as the band; judged against
    it, any legitimate difference would FAIL), "split" (the smallest ideal variant < median / SPREAD_LIMIT: most of
    them took a flip the others did not, so the max no longer stands out), "apart" (`apart`, the median distance between
    two ideal variants, below the variants' median distance to the reference / SPREAD_LIMIT: every variant took a
    discrete decision the exact reference alone did not, so the band measures that flip, not rounding), or ("", "") when
    they can."""
    if variants < MIN_BAND:
        return "few", (f"a band of {variants} ideal variant{'s' if variants != 1 else ''} cannot judge: a gate needs "
                       f"at least {MIN_BAND} (--band)")
    if not values:
        return "", ""
    median, high = statistics.median(values), max(values)
    if high == 0:
        return "zero", ("band of zero width: every band sample equals the reference bit for bit, so no gate can be "
                        "built on it; name legitimate alternatives (--band / --band-endpoint)")
    label = LABELS.get(stat, stat)
    admits = f"; the gate would admit up to {ratio * high:.3e}" if ratio else ""
    if high > SPREAD_LIMIT * median:
        times = f"{high / median:.1f} x its median" if median > 0 else "while its median is"
        return "wide", (f"band too wide to judge: {label} max {high:.3e} is {times} {median:.3e} "
                        f"(limit {SPREAD_LIMIT:g} x){admits}")
    low = min(values[-variants:]) if len(values) > variants else min(values)
    if low * SPREAD_LIMIT < median:
        return "split", (f"band split, cannot judge: its smallest ideal variant's {label} {low:.3e} is below 1/"
                         f"{SPREAD_LIMIT:g} of its median {median:.3e} (most variants took a discrete flip the others "
                         f"did not){admits}")
    own = values[-variants:] if len(values) > variants else values
    if apart is not None and statistics.median(own) > SPREAD_LIMIT * apart:
        return "apart", (f"the exact reference sits apart from every ideal variant, cannot judge: their {label} to it "
                         f"(median {statistics.median(own):.3e}) is over {SPREAD_LIMIT:g} x theirs to each other "
                         f"(median {apart:.3e}): a discrete decision (a top-k or routing flip) the reference alone "
                         f"took{admits}")
    return "", ""


@dataclass(frozen=True)
class Band:
    """Statistics of the band's samples: {statistic: [value per sample]} (the rerun first)."""

    samples: dict[str, list[float]]
    names: list[str] = field(default_factory=list)
    apart: float | None = None  # median rel-L2 between two ideal variants' outputs, when the check measured it

    def values(self, stat: str) -> list[float]:
        return [v for v in self.samples.get(stat, []) if v is not None]

    def summary(self, stat: str = "rel_l2") -> tuple[float, float, float]:
        """(min, median, max) of a statistic over the samples (NaN when it has none or one is NaN)."""
        values = self.values(stat)
        if not values or not all(math.isfinite(v) for v in values):
            return math.nan, math.nan, math.nan
        return min(values), statistics.median(values), max(values)

    def describe(self) -> str:
        low, mid, high = self.summary()
        count = len(self.values("rel_l2"))
        return f"band rel-L2 over {count} samples: min {low:.3e} / median {mid:.3e} / max {high:.3e}"

    def as_dict(self) -> dict:
        return {"names": self.names, "samples": self.samples, "apart": self.apart}

    def variants(self) -> int:
        """Ideal variants in the band: its samples less the rerun (the first)."""
        return max(len(self.values("rel_l2")) - 1, 0)

    def unfit(self, stats=RATIO_STATS, ratio: float | None = None) -> tuple[str, str]:
        """(kind, why) this band cannot judge the ratio statistics `stats` it holds (`spread_reason`)."""
        for stat in stats:
            if stat in RATIO_STATS and stat in self.samples:
                kind, why = spread_reason(self.values(stat), stat, self.variants(), ratio,
                                          self.apart if stat == "rel_l2" else None)
                if kind:
                    return kind, why
        return "", ""


@dataclass(frozen=True)
class Gate:
    """The verdict rule over a band: `ratio` x the band's largest value; `cap` an absolute rel-L2
    bound that can only make the rule stricter (None: none)."""

    ratio: float = 2.0
    cap: float | None = None

    def __post_init__(self):
        check_gate_ratio(self.ratio, "gate ratio")
        if self.cap is not None and not (self.cap > 0 and math.isfinite(self.cap)):
            raise ValueError(f"cap must be a positive number, got {self.cap!r}")

    def judge(self, stats: dict[str, float], band: Band) -> tuple[str, str]:
        """(PASS or FAIL, why it failed) for a row's statistics beside the band."""
        for stat in RATIO_STATS:
            if stat not in stats or stat not in band.samples:
                continue
            value, limit = stats[stat], self.ratio * band.summary(stat)[2]
            if not (math.isfinite(value) and math.isfinite(limit)):
                return FAIL, f"{stat} not finite"
            if value > limit:
                return FAIL, f"{stat} {value:.3e} > {limit:.3e}"
        for stat in BIAS_STATS:
            if stat in stats and stat in band.samples:
                reason = self._bias_reason(stat, stats[stat], stats.get(f"{stat}_se", 0.0), band)
                if reason:
                    return FAIL, reason
        if self.cap is not None and not stats["rel_l2"] <= self.cap:
            return FAIL, f"rel_l2 {stats['rel_l2']:.3e} > cap {self.cap:g}"
        return PASS, ""

    def verdict(self, stats: dict[str, float], band: Band) -> tuple[str, str]:
        """`judge`, then whether the band can judge (`Band.unfit`): a row within a band too wide or split to judge
        is INCONCLUSIVE (beyond it, it still FAILS); with too few variants every finite row is INCONCLUSIVE."""
        verdict, why = self.judge(stats, band)
        kind, unfit = band.unfit(tuple(stats), self.ratio)
        if not kind or "not finite" in why or (kind not in JUDGES_NOTHING and verdict == FAIL):
            return verdict, why
        return INCONCLUSIVE, unfit + (f" (the gate alone: {verdict}{': ' + why if why else ''})")

    def margin(self, stats: dict[str, float], band: Band) -> float:
        """How close a row is to failing: the largest of value / limit over its judged statistics
        (for the biases the distance from the band's centre over the allowed half-width); > 1 fails."""
        ratios = []
        for stat in RATIO_STATS:
            if stat in stats and stat in band.samples:
                limit = self.ratio * band.summary(stat)[2]
                ratios.append(stats[stat] / limit if limit > 0 else (math.inf if stats[stat] > 0 else 0.0))
        for stat in BIAS_STATS:
            if stat in stats and stat in band.samples:
                low, high = _bias_window(band, stats.get(f"{stat}_se", 0.0), stat)
                half, offset = (high - low) / 2, abs(stats[stat] - (low + high) / 2)
                ratios.append(offset / half if half > 0 else (math.inf if offset > 0 else 0.0))
        if self.cap is not None:
            ratios.append(stats["rel_l2"] / self.cap)
        values = [r if math.isfinite(r) else math.inf for r in ratios]
        return max(values) if values else math.nan

    @staticmethod
    def _bias_reason(stat: str, bias: float, se: float, band: Band) -> str:
        low, high = _bias_window(band, se, stat)
        if not (math.isfinite(bias) and math.isfinite(low)):
            return f"{stat} not finite"
        if low <= bias <= high:
            return ""
        return f"{stat} {bias:+.2e} outside [{low:+.2e}, {high:+.2e}]"

    def describe(self, stats: tuple[str, ...] = ("rel_l2",)) -> str:
        ratio_stats = " and ".join(s.replace("_", "-") for s in stats if s in RATIO_STATS)
        text = f"PASS when {ratio_stats} to the exact reference <= {self.ratio:g} x the band's max"
        biases = " and ".join(s.replace("_", "-") for s in BIAS_STATS if s in stats)
        if biases:
            text += (f", and {biases} within the band's range widened by that range and {BIAS_SIGMAS:g} "
                     f"standard errors")
        if self.cap is not None:
            text += f", and rel-L2 <= {self.cap:g}"
        return text + "; NaN/Inf, a backend never called or a check with no rows FAILS; " + inconclusive_rule()


def inconclusive_rule() -> str:
    """The INCONCLUSIVE rule in words (gate lines of the tables)."""
    return (f"INCONCLUSIVE (exit 3) when the band's max > {SPREAD_LIMIT:g} x its median or its smallest ideal variant "
            f"< its median / {SPREAD_LIMIT:g} or the variants lie {SPREAD_LIMIT:g} x closer to each other than to the "
            f"reference (a row beyond the gate still FAILS), or it has fewer than {MIN_BAND} ideal variants or zero "
            f"width (every sample 0: nothing judged)")


def _bias_window(band: Band, se: float, stat: str = "scale_bias") -> tuple[float, float]:
    """The biases `stat` a row may have: the band's range widened on each side by that range and by
    BIAS_SIGMAS standard errors `se` of the row's own estimate."""
    low, _, high = band.summary(stat)
    widen = (high - low) + BIAS_SIGMAS * se
    return low - widen, high + widen


def pairwise_median(outputs: list) -> float | None:
    """The median rel-L2 between two of `outputs` (tensors of one shape: the ideal variants'), None for fewer than 2."""
    from itertools import combinations

    from glmcheck.checks.metrics import rel_l2

    pairs = [rel_l2(a, b) for a, b in combinations(outputs, 2)]
    return statistics.median(pairs) if pairs else None


def band_from_rows(rows: list, names: list[str]) -> Band:
    """A Band from the comparison rows of its samples (objects with a `stats()` method)."""
    samples: dict[str, list[float]] = {}
    for row in rows:
        for stat, value in row.stats().items():
            samples.setdefault(stat, []).append(value)
    return Band(samples, names)
