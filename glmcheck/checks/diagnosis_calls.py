"""A layer's attention as one kernel call, and the layer0 gate applied to a call alone.

`record_calls` reruns the exact reference's forward with its backend wrapped so that every call it gets is kept:
one `LayerCall` per layer (the tensor-parallel rank slices joined along the heads), the same q, kv rows, indices,
softmax scale and d_v every backend saw at that layer of the reference's forward. `check_call` judges a kernel on
one such call as layer0 judges a forward: the exact output in fp64, the band's ideal kernels on the same call, the
row's rel-L2, largest per-token rel-L2, scale bias and temperature bias (`glmcheck.checks.layer0`), beside that band.
The diagnosis (drift's layers, logits' and the sweep's layer 0) and the minimal repro use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from glmcheck.backends.names import band_names
from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.backends.registry import get_backend, register_backend, unregister_backend
from glmcheck.checks.band import DEFAULT_BAND, Band, Gate, band_from_rows
from glmcheck.checks.metrics import TEMPER_STEP, FiniteCache
from glmcheck.checks.rows import ComparisonRow, compare, judge_row
from glmcheck.kernels.validate import valid_slot_mask
from glmcheck.model.kernel_call import KernelCall

KernelFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class LayerCall(KernelCall):
    """One layer's attention call over every head (`KernelCall`'s fields; under TP the rank slices joined): q
    [T, H, d_qk] bf16, kv [S, d_qk] bf16, indices [T, K] int32, lengths [T] int32 or None (topk_length), sm_scale,
    d_v."""

    @property
    def tokens(self) -> int:
        return self.q.shape[0]

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    def valid(self) -> torch.Tensor:
        """[T, K] bool: the slots that name a row (`valid_slot_mask`)."""
        return valid_slot_mask(self.indices, self.kv.shape[0], self.lengths)

    def run(self, kernel: KernelFn, *, sm_scale: float | None = None) -> torch.Tensor:
        """`kernel` on this call (at softmax scale `sm_scale` when given)."""
        return kernel(self.q, self.kv, self.indices, self.sm_scale if sm_scale is None else sm_scale, self.d_v,
                      topk_length=self.lengths)

    def exact(self, *, sm_scale: float | None = None) -> torch.Tensor:
        """The exact output in fp64 [T, H, d_v]."""
        return self.run(lambda *a, **k: sparse_mla_reference(*a, **k, dtype=torch.float64), sm_scale=sm_scale)

    def temperature_direction(self, exact: torch.Tensor) -> torch.Tensor:
        """d(exact output) / d(relative softmax scale), fp64 [T, H, d_v], from `exact` (this call's `exact()`) and
        the exact output at softmax scale x (1 + TEMPER_STEP), as layer0 takes it."""
        return (self.exact(sm_scale=self.sm_scale * (1 + TEMPER_STEP)) - exact) / TEMPER_STEP

    def subset(self, tokens: torch.Tensor | None = None, heads: torch.Tensor | None = None) -> LayerCall:
        """The call cut to `tokens` (positions of this call, in order) and `heads`, contiguous; the KV rows stay."""
        q, indices, lengths = self.q, self.indices, self.lengths
        if tokens is not None:
            tokens = tokens.to(q.device)
            q, indices = q[tokens], indices[tokens]
            lengths = lengths[tokens] if lengths is not None else None
        if heads is not None:
            q = q[:, heads.to(q.device)]
        return replace(self, q=q.contiguous(), indices=indices.contiguous(),
                       lengths=lengths.contiguous() if lengths is not None else None)


class _Enough(Exception):
    """Raised by a forward hook once the layers asked for have run (the rest of the forward is not needed)."""


def record_calls(model: torch.nn.Module, input_ids: torch.Tensor, exact: str, options, *,
                 layers: int | None = None) -> list[LayerCall]:
    """The exact reference `exact`'s calls in one forward of `model` (SwapOptions `options`), one LayerCall per
    layer; with `layers` the forward stops once that many layers ran. Empty when the calls do not come one per
    rank per layer (layers that attend densely)."""
    from glmcheck.checks.runner import forward_under

    kept: list[tuple] = []
    base = get_backend(exact, kv_cache_dtype=options.kv_cache_dtype).fn
    name = f"{exact}@calls"

    def recording(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        kept.append((q, kv, indices, topk_length, sm_scale, d_v))
        return base(q, kv, indices, sm_scale, d_v, topk_length=topk_length)

    register_backend(name, recording, f"{exact}, its calls kept (the diagnosis)", source="glmcheck.checks.diagnosis",
                     fp32_output=True)
    handle = None
    if layers is not None and layers < model.config.num_hidden_layers:
        def enough(module, args, output):
            raise _Enough

        handle = model.model.layers[layers - 1].register_forward_hook(enough)
    try:
        forward_under(model, input_ids, name, options)
    except _Enough:
        pass
    finally:
        if handle is not None:
            handle.remove()
        unregister_backend(name)
    tp = options.tp
    wanted = (layers or model.config.num_hidden_layers) * tp
    if len(kept) != wanted:
        return []
    calls = []
    for start in range(0, len(kept), tp):
        ranks = kept[start:start + tp]
        q = ranks[0][0] if tp == 1 else torch.cat([r[0] for r in ranks], dim=1)
        _, kv, indices, lengths, sm_scale, d_v = ranks[0]
        calls.append(LayerCall(q, kv, indices, lengths, float(sm_scale), int(d_v)))
    return calls


@dataclass
class CallCheck:
    """A kernel judged on one call (`check_call`): the exact output and its temperature direction (fp64), the band's
    outputs, its rows and Band, the kernel's output and its judged row."""

    exact: torch.Tensor
    direction: torch.Tensor
    band_outputs: list[torch.Tensor]
    band: Band
    output: torch.Tensor
    row: ComparisonRow


def band_outputs(call: LayerCall, size: int = DEFAULT_BAND, kv_cache_dtype: str | None = None,
                 first: int = 0) -> list[torch.Tensor]:
    """The band's ideal kernels `band:first` .. `band:first+size-1` on `call`."""
    return [call.run(get_backend(name, kv_cache_dtype=kv_cache_dtype))
            for name in band_names(first + size)[first:]]


def sample_rows(call_exact: torch.Tensor, direction: torch.Tensor, outputs: list[torch.Tensor]) -> list[ComparisonRow]:
    """The band's sample rows on a call: the exact output's rerun (a zero sample, as layer0's first), then each of
    `outputs`, with layer0's statistics against `call_exact`."""
    cache = FiniteCache()
    return [compare(name, name, "exact", "latent", actual, call_exact, per_token=True, temperature=direction,
                    finite=cache)
            for name, actual in [("rerun", call_exact), *((f"band:{k}", o) for k, o in enumerate(outputs))]]


def judge_outputs(call_exact: torch.Tensor, direction: torch.Tensor, outputs: list[torch.Tensor],
                  output: torch.Tensor, gate: Gate, label: str = "kernel") -> tuple[Band, ComparisonRow]:
    """The Band of `outputs` (`sample_rows`) and the judged row of `output`, all against `call_exact` with layer0's
    statistics."""
    samples = sample_rows(call_exact, direction, outputs)
    band = band_from_rows(samples, [r.backend for r in samples])
    row = compare(label, label, "exact", "latent", output, call_exact, per_token=True, temperature=direction)
    judge_row(row, gate, band)
    return band, row


def check_call(call: LayerCall, kernel: KernelFn, *, band_size: int = DEFAULT_BAND, gate: Gate = Gate(),
               kv_cache_dtype: str | None = None, label: str = "kernel") -> CallCheck:
    """`kernel` on `call` judged beside the band's `band_size` ideal kernels on the same call, by layer0's gate
    (module docstring)."""
    exact = call.exact()
    direction = call.temperature_direction(exact)
    outputs = band_outputs(call, band_size, kv_cache_dtype)
    output = call.run(kernel)
    band, row = judge_outputs(exact, direction, outputs, output, gate, label)
    return CallCheck(exact, direction, outputs, band, output, row)
