"""How wide legitimate noise bands are, and what a wide one lets through: the measurement behind the
INCONCLUSIVE rule (`glmcheck.checks.band`: SPREAD_LIMIT, MIN_BAND, GATE_RATIO_BOUNDS; docs/reliability.md, "Gate"):
the default band's max / median ("wide" past 3), median / smallest variant ("split") and, for the logits, the
variants' median distance to the reference / their median distance to each other ("apart").

Per seed, one forward per backend captures the layer-0 latent output, every layer's hidden state and the final
logits: the exact reference twice, all 16 band variants, the kernel under test and the planted faults of
`glmcheck.selftest.faults`. Printed per check (layer0, logits, drift at each layer, firsttoken over runs of
FIRSTTOKEN_PROMPTS seeds): the default band's (rerun + band:0..3) spread ratios, and per seed every fault's margin
(its distance / (2 x the band max); > 1 is caught) beside the kernel's; then how often a held-out variant (band:8..15)
FAILS against a band of the rerun and n other variants.

    python scripts/band_spread.py --model tiny --tokens 64 --seeds 12 [--jsonl OUT]   # ~30 s a seed on the CPU
"""

from __future__ import annotations

import argparse
import json
import statistics

FIRSTTOKEN_PROMPTS = 4
DEFAULT_BAND = ["rerun"] + [f"band:{k}" for k in range(4)]


def measure(model: str, tokens: int, seeds: list[int]) -> list[dict]:
    import glmcheck.kernels  # noqa: F401  (the interpreter on CPU-only machines)
    from glmcheck.checks import metrics
    from glmcheck.checks.firsttoken import choose
    from glmcheck.checks.runner import SwapOptions, forward_under
    from glmcheck.data.model_prompts import model_prompt
    from glmcheck.model.load import ModelSpec, load_model
    from glmcheck.selftest.faults import FAULTS
    from glmcheck.selftest.rates import register_faults

    register_faults()
    backends = ["reference", "reference"] + [f"band:{k}" for k in range(16)] + ["triton_sparse_mla", *FAULTS]
    fixed, records = None, []
    for seed in seeds:
        dummy = model == "tiny" or model.startswith("glm-")
        spec = ModelSpec(preset=model, seed=seed if dummy else 0)
        net = load_model(spec, "cpu") if dummy or fixed is None else fixed
        fixed = net
        layers = net.config.num_hidden_layers
        ids = model_prompt(spec, net.config.vocab_size, tokens, seed, "cpu")
        runs = [forward_under(net, ids, name, SwapOptions(), latent_layers=[0], hidden_layers=range(layers))
                for name in backends]
        ref = runs[0]
        ref_choice, _ = choose(ref.captured.logits[0, -1])
        rows = {}
        for name, run in zip(backends[1:], runs[1:]):
            _, logprobs = choose(run.captured.logits[0, -1])
            rows["rerun" if name == "reference" else name] = {
                "layer0": metrics.rel_l2(run.captured.latent[0], ref.captured.latent[0]),
                "token_max": metrics.token_max_rel_l2(run.captured.latent[0], ref.captured.latent[0]),
                "logits": metrics.rel_l2(run.captured.logits, ref.captured.logits),
                "dlogprob": abs(float(logprobs[ref_choice.token]) - ref_choice.logprob),
                **{f"drift{layer}": metrics.rel_l2(run.captured.hidden[layer], ref.captured.hidden[layer])
                   for layer in range(layers)}}
        variants = [runs[backends.index(f"band:{k}")].captured.logits for k in range(4)]
        apart = statistics.median(metrics.rel_l2(a, b) for i, a in enumerate(variants) for b in variants[i + 1:])
        records.append({"model": model, "tokens": tokens, "seed": seed, "rows": rows, "logits_apart": apart})
    return records


def _spread(values: list[float]) -> float:
    median = statistics.median(values)
    return max(values) / median if median > 0 else float("inf")


def _split(values: list[float]) -> float:
    """median / the smallest ideal variant (values: the rerun first): > 3 is a "split" band."""
    low = min(values[1:])
    return statistics.median(values) / low if low > 0 else float("inf")


def report(records: list[dict]) -> None:
    faults = [k for k in records[0]["rows"] if k.startswith("fault:")]
    checks = [k for k in records[0]["rows"]["rerun"] if k != "dlogprob"]
    for check in checks:
        print(f"\n{check}: seed, band max / median, margins (distance / (2 x band max)) of the kernel and the faults")
        for rec in records:
            rows = rec["rows"]
            top = max(rows[k][check] for k in DEFAULT_BAND)
            margins = " ".join(f"{f.split(':')[1]} {rows[f][check] / (2 * top):.2f}" for f in faults)
            values = [rows[k][check] for k in DEFAULT_BAND]
            apart = ""
            if check == "logits" and rec.get("logits_apart"):
                apart = f" apart {statistics.median(values[1:]) / rec['logits_apart']:5.2f}"
            print(f"  {rec['seed']:3d} {_spread(values):6.2f} split {_split(values):5.2f}{apart}  "
                  f"kernel {rows['triton_sparse_mla'][check] / (2 * top):.2f}  {margins}")
    print(f"\nfirsttoken, runs of {FIRSTTOKEN_PROMPTS} seeds: band max / median of the mean |dlogprob|, margins")
    for start in range(0, len(records) - FIRSTTOKEN_PROMPTS + 1, FIRSTTOKEN_PROMPTS):
        group = records[start:start + FIRSTTOKEN_PROMPTS]
        mean = {k: statistics.mean(r["rows"][k]["dlogprob"] for r in group) for k in group[0]["rows"]}
        top = max(mean[k] for k in DEFAULT_BAND)
        print(f"  seeds {start}-{start + FIRSTTOKEN_PROMPTS - 1} {_spread([mean[k] for k in DEFAULT_BAND]):6.2f}  "
              + " ".join(f"{k.split(':')[-1]} {mean[k] / (2 * top):.2f}" for k in ["triton_sparse_mla", *faults]))
    print("\nheld-out variant (band:8..15) FAILS against the rerun + n other variants, 2 x max:")
    for check in checks:
        counts = []
        for n in (1, 2, 3, 4):
            fails = total = 0
            for rec in records:
                rows = rec["rows"]
                for held in range(8, 16):
                    others = [k for k in range(16) if k != held][:n]
                    top = max([rows["rerun"][check]] + [rows[f"band:{k}"][check] for k in others])
                    fails, total = fails + (rows[f"band:{held}"][check] > 2 * top), total + 1
            counts.append(f"n={n}: {fails}/{total}")
        print(f"  {check}: " + ", ".join(counts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--jsonl", default=None, help="also write (or, when it exists, read) the records here")
    ns = parser.parse_args()
    try:
        with open(ns.jsonl) as handle:
            records = [json.loads(line) for line in handle if json.loads(line)["model"] == ns.model]
    except (TypeError, FileNotFoundError):
        records = measure(ns.model, ns.tokens, list(range(ns.seeds)))
        if ns.jsonl:
            with open(ns.jsonl, "w") as handle:
                handle.writelines(json.dumps(r) + "\n" for r in records)
    report(records)


if __name__ == "__main__":
    main()
