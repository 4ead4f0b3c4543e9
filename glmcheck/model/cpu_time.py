"""How long a model check's forwards take on the CPU, estimated from the model's terms before anything is built, so
that a run of hours is refused in one line instead of started (docs/checks.md, "Exit codes").

Three terms: the Triton backends run in Triton's interpreter, one kernel call per DSA layer and tensor-parallel rank
(`glmcheck.kernels.runtime.interpreted_seconds` on every token's selected rows: the causal prefix up to the top-k;
it errs high); the other backends' attention is torch's over the same rows (transformers' own over every earlier
position) at ATTENTION_FLOPS_PER_S; every forward also runs the model's dense work (its projections, the routed
experts a token picks, the indexer's [T, T] scores, the output head) at DENSE_FLOPS_PER_S. The torch rates err fast,
so those terms alone refuse only what is surely hours (GLM-5.2's layer 0 at 4096 tokens under the reference alone:
estimated 12 minutes, measured 42 on a busy 2-core machine).
"""

from __future__ import annotations

from collections.abc import Iterable

from glmcheck.kernels.runtime import interpreted_seconds
from glmcheck.model.sharding import full_shapes

# A check on the CPU whose forwards are estimated above this is refused (the README's main command: 10-15 s).
CPU_CHECK_LIMIT_S = 3600
# The CPU's dense rate for the model's own work: well above what 2 cores give in bf16 / fp32 (so the dense term
# errs low and alone refuses only what is surely hours).
DENSE_FLOPS_PER_S = 100e9
# torch's attention over gathered rows on the CPU (the fp32 / fp64 reference, the band's kernels, transformers' dense
# attention): measured 1.7-7.7 GFLOP/s on 2 busy cores at 64 heads, d_qk 576.
ATTENTION_FLOPS_PER_S = 10e9


def selected_blocks(tokens: int, topk: int) -> int:
    """Blocks of 16 rows that T tokens of a causal prefill select, summed over the tokens: token t selects its
    whole prefix (t + 1 rows) up to `topk`."""
    short = min(tokens, topk)  # tokens t < topk select t + 1 rows
    blocks = sum(-(-(t + 1) // 16) for t in range(short))
    return blocks + (tokens - short) * -(-topk // 16)


def selected_slots(tokens: int, topk: int) -> int:
    """Rows that T tokens of a causal prefill select, summed over the tokens (token t: min(t + 1, topk))."""
    short = min(tokens, topk)
    return short * (short + 1) // 2 + (tokens - short) * topk


def dense_flops(config, tokens: int) -> float:
    """FLOPs of one forward's dense work over `tokens` tokens: 2 x the weights a token multiplies (of each MoE layer
    the routed experts it picks), the indexer's scores over every earlier position, the output head."""
    picked = config.num_experts_per_tok / max(config.n_routed_experts, 1)
    per_token = 0.0
    for name, shape in full_shapes(config).items():
        if not name.endswith("weight") or len(shape) < 2 or name == "model.embed_tokens.weight":
            continue
        count = 1
        for d in shape:
            count *= d
        per_token += count * (picked if ".mlp.experts." in name else 1.0)
    indexer = tokens * tokens * config.index_n_heads * config.index_head_dim * config.num_hidden_layers
    return 2.0 * (per_token * tokens + indexer)


def check_cpu_time(config, forwards: Iterable[tuple[int, str]], tp: int, option: str, *, calls: int | None = None
                   ) -> None:
    """ValueError naming `option` when the CPU `forwards` ((tokens, backend) pairs, one per model forward) are
    estimated above CPU_CHECK_LIMIT_S; call it only where the model runs on the CPU. Each layer calls the backend
    `calls` times (default `tp`: every rank in one process) on H / tp heads."""
    d_qk = config.kv_lora_rank + config.qk_rope_head_dim
    heads = config.num_attention_heads // tp
    layers = config.num_hidden_layers
    seconds, interpreted = 0.0, False
    for tokens, backend in forwards:
        seconds += dense_flops(config, tokens) / DENSE_FLOPS_PER_S
        if backend.startswith("triton_sparse_mla"):
            interpreted = True
            blocks = selected_blocks(tokens, config.index_topk)
            seconds += layers * (tp if calls is None else calls) * interpreted_seconds(blocks, heads, d_qk)
        else:
            rows = (tokens * (tokens + 1) // 2 if backend.startswith("hf_")
                    else selected_slots(tokens, config.index_topk))
            seconds += layers * 2.0 * rows * config.num_attention_heads * (d_qk + config.kv_lora_rank) \
                / ATTENTION_FLOPS_PER_S
    if seconds > CPU_CHECK_LIMIT_S:
        why = "the Triton backends run in Triton's interpreter; " if interpreted else ""
        raise ValueError(f"{option}: about {seconds / 3600:,.1f} hours on the CPU ({why}the limit is "
                         f"{CPU_CHECK_LIMIT_S / 60:.0f} minutes): use a GPU, fewer tokens or layers"
                         + (", or backends other than triton_sparse_mla*" if interpreted else ""))
