"""A swapped layer's attention under `--calls serving`: each backend called as an engine's extend calls it (the pool
and the packed calls: `glmcheck.model.engine_pool`), and compared bit for bit with its own one-shot call on the same
inputs.

Per layer and TP rank the backend is called once per chunk engine-shaped and (`EngineCalls.compares`) once one-shot
(today's call: q of all T tokens, the prompt's rows, indices into them); the model goes on with the engine-shaped
outputs. `EngineCalls` (one per check, in its `SwapOptions`) tallies per backend how many layer calls equal their
one-shot output bit for bit, the largest difference of those that do not, the time each shape took (the device
synchronised around each) and the shapes that ran.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field

import torch

from glmcheck.backends.names import is_band_name
from glmcheck.kernels.runtime import interpreter_active
from glmcheck.model.engine_pool import EnginePool, needed_rows
from glmcheck.model.engine_shape import DEFAULT_REQUESTS, EngineShape
from glmcheck.model.kernel_call import KernelCall, check_output

TORCH_BACKENDS = ("reference", "reference:fp64", "reference:bf16", "torch_bf16")  # never in Triton's interpreter


@dataclass
class OneShotTally:
    """One backend's engine-shaped layer calls: `layers` compared with the one-shot call (per rank), `equal` of them
    bit for bit, `max_abs` the largest |difference| of the others, `engine_calls` backend calls made engine-shaped,
    seconds spent in each shape (the device synchronised around each)."""

    layers: int = 0
    equal: int = 0
    max_abs: float = 0.0
    engine_calls: int = 0
    engine_seconds: float = 0.0
    one_shot_seconds: float = 0.0


class EngineCalls:
    """The engine-shaped calls of one check: the `shape` asked for, and what ran (`summary`)."""

    def __init__(self, shape: EngineShape):
        self.shape = shape
        self.tally: dict[str, OneShotTally] = {}
        self.ran: dict[int, dict] = {}  # prompt tokens -> the resolved shape

    def pool(self, rows: torch.Tensor, codes: torch.Tensor | None, topk: int) -> EnginePool:
        """A forward's pool for its first layer's `rows` [T, d_qk] (`codes`: their FP8 pool rows or None)."""
        tokens, d_qk = rows.shape
        requests = self.shape.requests or DEFAULT_REQUESTS
        shape = self.shape.resolved(rows.device.type, d_qk, needed_rows(tokens, topk, requests))
        self.ran[tokens] = {"tokens": tokens, "chunk": shape.chunk, "pool_rows": shape.pool_rows,
                            "requests": shape.requests, "pool_elements": shape.pool_rows * d_qk}
        return EnginePool(shape, rows, codes, topk)

    def compares(self, name: str) -> bool:
        """Whether backend `name` is also called one-shot: `shape.compare`, or by default every backend but those
        that may run Triton kernels in the CPU interpreter (there only glmcheck's torch ones: the references, the band,
        torch_bf16); what the interpreter gives is pinned by tests/test_engine_calls.py."""
        if self.shape.compare is not None:
            return self.shape.compare
        return not interpreter_active() or name.split("@")[0] in TORCH_BACKENDS or is_band_name(name)

    def summary(self) -> dict:
        """The record's facts: asked, ran (per prompt length) and per backend its `OneShotTally`."""
        return {"asked": self.shape.describe(), "ran": [self.ran[t] for t in sorted(self.ran)],
                "backends": {name: asdict(t) for name, t in self.tally.items()}}


def _timed(device: torch.device):
    """A stopwatch that synchronises `device` (CUDA) at both ends."""
    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()
    return now


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (a NaN equals the same NaN)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8),
                                                                      b.contiguous().view(torch.uint8))


@dataclass
class LayerCall:
    """One layer's inputs as the session made them: q [T, H, d_qk] bf16 (all heads), the prompt's rows [T, d_qk]
    bf16 and their FP8 codes [T, bytes] (or None), one-shot indices [T, K] int32 and lengths (or None)."""

    layer: int
    q: torch.Tensor
    rows: torch.Tensor
    codes: torch.Tensor | None
    indices: torch.Tensor
    lengths: torch.Tensor | None
    scaling: float
    d_v: int
    plans: dict = field(default_factory=dict)


def run_engine_layer(session, call: LayerCall) -> torch.Tensor:
    """The layer's output [T, H, d_v] from engine-shaped calls (module docstring), one-shot compared per rank.
    `session` is the `glmcheck.model.swap.SwapSession` (its backend call, counters, clock and recorded calls)."""
    engine: EngineCalls = session.engine
    if session.pool is None:
        session.pool = engine.pool(call.rows, call.codes, call.indices.shape[1])
        if call.codes is not None:
            from glmcheck.backends.flashmla_kv import hold_pool

            hold_pool(session.pool.rows, session.pool.paged_codes())
    pool: EnginePool = session.pool
    tally = engine.tally.setdefault(session.name, OneShotTally())
    per_rank = call.q.shape[1] // session.tp
    q_ranks = [call.q] if session.tp == 1 else [call.q[:, r * per_rank:(r + 1) * per_rank].contiguous()
                                                for r in range(session.tp)]
    now = _timed(call.q.device)
    started = now()
    one_shot = [session._one_shot(call.layer, q_rank, call.rows, call.indices, call.lengths, call.plans, rank,
                                  call.scaling, call.d_v) for rank, q_rank in enumerate(q_ranks)] \
        if engine.compares(session.name) else []
    tally.one_shot_seconds += now() - started
    outs: list[torch.Tensor | None] = [None] * len(q_ranks)
    pool.begin_layer()
    started = now()
    with session.clock.span(call.layer, call.q.device) if session.clock is not None else contextlib.nullcontext():
        for chunk, (start, stop) in enumerate(pool.chunks()):
            pool.write(call.rows, call.codes, start, stop)
            packed = pool.packed(call.indices, chunk)
            for rank, q_rank in enumerate(q_ranks):
                q_call = q_rank[packed.query]
                key = ("engine", rank, chunk)
                plan = call.plans.get(key) if session.reuse_plans else None
                if plan is None and session.backend.planner is not None:
                    plan = session.backend.plan(packed.indices, pool.rows.shape[0], per_rank, packed.lengths)
                    call.plans[key] = plan
                    session.plan_builds[call.layer] += 1
                if rank == 0 and chunk == 0 and session.recorded is not None:
                    session._record(KernelCall(q_call, pool.kv, packed.indices, packed.lengths, call.scaling,
                                               call.d_v))
                part = session._call(q_call, pool.kv, packed.indices, call.scaling, call.d_v, packed.lengths, plan)
                session.calls[call.layer] += 1
                tally.engine_calls += 1
                check_output(session.name, part, q_call, call.d_v, session.backend.fp32_output)
                if outs[rank] is None:
                    outs[rank] = part.new_empty((pool.tokens,) + tuple(part.shape[1:]))
                outs[rank][start:stop] = part[packed.offset:packed.offset + packed.count]
    tally.engine_seconds += now() - started
    for ours, theirs in zip(outs, one_shot):
        tally.layers += 1
        if bitwise_equal(ours, theirs):
            tally.equal += 1
        else:
            gap = (ours.double() - theirs.double()).abs().nan_to_num(nan=math.inf).max()
            tally.max_abs = max(tally.max_abs, float(gap))
    return outs[0] if session.tp == 1 else torch.cat(outs, dim=1)

