"""layer0 on a reference model on the CPU, with the two scale faults planted on a torch band variant (band:5):
python docs/cpu-runs/2026-12-02-temperature-bias-ref-gpu.py MODEL TOKENS SEEDS. Prints, per seed (a held-out window), the band's
temperature biases and each row's verdict, temperature bias (+ its standard error), scale bias and rel-L2.
The faults wrap band:5 rather than the Triton kernel so that the GPU model's geometry runs in torch on a CPU
(docs/reliability.md, "Temperature bias"); the H200's 20-seed rates: scripts/gpu_layer0_rates.sh."""
import sys, time, torch
from glmcheck.backends.band_kernels import band_variant
from glmcheck.backends.registry import register_backend
from glmcheck.checks.layer0 import run_layer0
from glmcheck.data.heldout import heldout_stream, natural_prompt
from glmcheck.data.model_tokenizer import model_tokenizer
from glmcheck.model.load import ModelSpec, load_model

base = band_variant(5)
def sm(q, kv, i, s, d_v=512, *, topk_length=None): return base(q, kv, i, s * 1.001, d_v, topk_length=topk_length)
def out(q, kv, i, s, d_v=512, *, topk_length=None): return (base(q, kv, i, s, d_v, topk_length=topk_length).float() * 1.003).to(torch.bfloat16)
register_backend("f:sm1.001", sm); register_backend("f:x1.003", out)
model, tokens, seeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = ModelSpec(model)
net = load_model(spec, torch.device("cpu"), layer0_only=True)
tok = model_tokenizer(spec, net.config.vocab_size)
stream = heldout_stream(tok)
for seed in range(seeds):
    t = time.time()
    ids = natural_prompt(tok, tokens, seed, torch.device("cpu"), stream=stream)
    r = run_layer0(net, ids, ["band:4", "band:5", "f:sm1.001", "f:x1.003"])
    band = [x.extra["temperature_bias"] for x in r.rows if x.comparison.startswith("noise band:")]
    line = [f"seed {seed} ({time.time()-t:.0f}s) band tb [{min(band):+.2e}, {max(band):+.2e}]"]
    for x in r.rows:
        if x.comparison.startswith("noise band:"):
            continue
        line.append(f"{x.backend}: {x.verdict} tb {x.extra['temperature_bias']:+.2e} se {x.extra['temperature_bias_se']:.1e} sb {x.extra['scale_bias']:+.2e} rel {x.rel_l2:.2e} [{x.note[:60]}]")
    print("\n  ".join(line), flush=True)
