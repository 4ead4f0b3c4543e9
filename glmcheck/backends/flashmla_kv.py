"""FlashMLA's FP8 sparse decode kernel used at prefill, as the engines use it on an FP8 KV cache (`flashmla_kv`).

SGLang on SM90 picks FlashMLA's FP8 sparse *decode* kernel for DSA prefill over an FP8 cache, and vLLM does the
same at few heads per rank: every prefill token is a batch entry of one query reading DeepSeek-V3.2's FP8 sparse
pool (`glmcheck.kernels.fp8`: 656 bytes a token, paged 64 tokens a block). This backend does that:

- the rows it is given are written to that pool. They must already be FP8 values (a run with
  `--kv-cache-dtype fp8_e4m3` hands every backend the dequantised pool's rows): re-quantising FP8 values with
  power-of-two scales gives back the same values, so the kernel reads exactly the cache the other rows read. Rows
  off the FP8 grid are a ValueError (an FP8 kernel on a bf16 cache would be judged on its quantisation error);
- q becomes [T, 1, H', 576] with the heads zero-padded to 64 or 128 (the only head counts the kernel takes), the
  indices [T, 1, top-k'] padded with -1 to a multiple of 128;
- the V3.2 layout takes no `topk_length`: the slots at or past a token's length are set to -1 instead.

Found like `flashmla_sparse` (`glmcheck.backends.flashmla.find_flashmla`), through the library's torch op
`_flashmla_C.sparse_decode_fwd` (the library-path and vllm forms; the Python packages' wrappers are not used). Its
trailing optional arguments beyond the ones passed here are given None, read from the op's schema.
"""

from __future__ import annotations

import torch

from glmcheck.backends.flashmla import LATENT_DIMS, FlashMLAUnavailable, find_flashmla
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool
from glmcheck.kernels.validate import check_prefill_args

HEAD_COUNTS = (64, 128)  # the decode kernel's query heads
TOPK_MULTIPLE = 128


def _decode_op():
    """The loaded library's sparse decode op, or FlashMLAUnavailable saying why."""
    flash = find_flashmla()
    ops = getattr(torch.ops, "_flashmla_C", None)
    op = getattr(ops, "sparse_decode_fwd", None) if ops is not None else None
    if op is None:
        raise FlashMLAUnavailable(f"flashmla_kv needs FlashMLA's torch op _flashmla_C.sparse_decode_fwd (the "
                                  f"library path or vllm form); the FlashMLA found ({flash.source}) has none")
    return op


_last_pool: list = []  # (rows tensor, its version, the pool): a layer's rank slices share one rows tensor
_held: list = []  # (rows tensor, the FP8 pool they are the values of): an engine-shaped pool (`hold_pool`)


def hold_pool(rows: torch.Tensor, pool: torch.Tensor) -> None:
    """Calls whose kv is `rows` [S, 576] (or a [S, 1, 576] view of it) read `pool` [S / 64, 64, 1, 656] uint8 as it
    is, not a pool written from
    them: the FP8 pool of `--calls serving` (`glmcheck.model.engine_pool`), whose dequantised values `rows` are and
    which its owner keeps in step with them. Held until `release_pool`."""
    _held[:] = [rows, pool]


def release_pool() -> None:
    """Forget the pool `hold_pool` held."""
    _held.clear()


def fp8_pool_of(kv: torch.Tensor, d_rope: int) -> torch.Tensor:
    """The FP8 pool [pages, 64, 1, 656] uint8 holding the rows `kv` [S, 576] bf16 exactly; ValueError when a row is
    not an FP8 value of that layout (module docstring). The same rows tensor, unchanged since (the calls of one
    layer's rank slices), gets the pool written the first time: one write per layer, as an engine's KV store. An
    inference tensor (made under `torch.inference_mode`, as the checks' forwards) has no version counter to show
    it unchanged: its pool is written on every call (the same bytes: the quantiser is deterministic). Rows whose pool
    `hold_pool` holds read that pool."""
    if _held and (_held[0].data_ptr(), _held[0].shape, _held[0].stride()) == (kv.data_ptr(), kv.shape, kv.stride()):
        return _held[1]
    version = None if kv.is_inference() else kv._version
    if version is not None and _last_pool and _last_pool[0] is kv and _last_pool[1] == version:
        return _last_pool[2]
    pool = _checked_pool(kv, d_rope)
    _last_pool[:] = [kv, version, pool] if version is not None else []
    return pool


def _checked_pool(kv: torch.Tensor, d_rope: int) -> torch.Tensor:
    pool = quantize_kv_pool(kv, d_rope=d_rope)
    back = dequantize_kv_pool(pool, kv.shape[0], d_rope=d_rope)
    finite = torch.isfinite(kv).all(dim=1)  # a NaN / Inf row is stored as FP8 stores it: it must still reach q
    if not torch.equal(back[finite].view(torch.int16), kv[finite].view(torch.int16)):
        raise ValueError("flashmla_kv reads DSA's FP8 KV pool: its rows must be the pool's FP8 values (run the check "
                         "with --kv-cache-dtype fp8_e4m3); these rows are not")
    return pool


def flashmla_kv_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                        d_v: int = 512, *, topk_length: torch.Tensor | None = None) -> torch.Tensor:
    """Sparse-MLA prefill through FlashMLA's FP8 sparse decode kernel (module docstring); same arguments and contract
    as `glmcheck.kernels.sparse_mla_prefill` (H <= 128 heads), returns [T, H, d_v] bf16."""
    args = check_prefill_args(q, kv, indices, sm_scale, d_v, topk_length)
    num_tokens, num_heads, d_qk = args.q.shape
    if (d_v, d_qk - d_v) != LATENT_DIMS:
        raise ValueError(f"flashmla_kv takes a {LATENT_DIMS[0]} + {LATENT_DIMS[1]} rope latent (d_qk "
                         f"{sum(LATENT_DIMS)}) only, got d_v {d_v}, d_qk {d_qk}")
    op = _decode_op()
    if num_tokens == 0 or args.topk == 0:
        return torch.zeros((num_tokens, num_heads, d_v), dtype=torch.bfloat16, device=args.q.device)
    return flashmla_kv_on_pool(args.q, fp8_pool_of(args.kv, d_qk - d_v), args.indices, args.sm_scale, d_v,
                               num_rows=args.num_kv_rows, topk_length=args.topk_length, op=op)


def flashmla_kv_on_pool(q: torch.Tensor, pool: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int, *,
                        num_rows: int, topk_length: torch.Tensor | None = None, op=None) -> torch.Tensor:
    """The kernel on a pool already written (`glmcheck.kernels.fp8.quantize_kv_pool`, [pages, 64, 1, 656] uint8):
    q [T, H, 576] bf16, indices [T, K] int32 into its first `num_rows` rows, topk_length [T] or None; returns
    [T, H, d_v] bf16 (a token with no valid slot: zeros). The engines' own call, with no quantisation in it."""
    op = op or _decode_op()
    num_tokens, num_heads, d_qk = q.shape
    topk = indices.shape[1]
    heads = next(h for h in HEAD_COUNTS if h >= num_heads)
    q4 = torch.zeros((num_tokens, 1, heads, d_qk), dtype=torch.bfloat16, device=q.device)
    q4[:, 0, :num_heads] = q
    idx = indices
    if topk_length is not None:  # the V3.2 layout takes no lengths: slots past a token's length are empty
        slots = torch.arange(topk, device=idx.device)[None, :]
        idx = torch.where(slots < topk_length[:, None].clamp(0, topk), idx, -1)
    idx = torch.where((idx >= 0) & (idx < num_rows), idx, -1).to(torch.int32)
    padded = -(-topk // TOPK_MULTIPLE) * TOPK_MULTIPLE
    if padded != topk:
        idx = torch.nn.functional.pad(idx, (0, padded - topk), value=-1)
    call = [q4, pool.view(torch.float8_e4m3fn), idx[:, None, :].contiguous(), None, None, None, None, None, None,
            None, d_v, float(sm_scale)]
    call += [None] * (len(op.default._schema.arguments) - len(call))
    out = op(*call)[0][:, 0, :num_heads].contiguous()
    out[~(idx >= 0).any(dim=1)] = 0  # a token with no valid slot gives zeros, as the contract says
    return out
