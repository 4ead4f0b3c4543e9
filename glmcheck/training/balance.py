"""Expert load balancing without an auxiliary loss (DeepSeek-V3's bias update, as GLM-5.x trains).

Each MoE router picks its top-k experts by sigmoid score plus `e_score_correction_bias`; the
bias is not trained by gradients. After every optimiser step each expert's bias moves by
`rate` towards balance: up when the expert got fewer tokens than the mean, down when more.
`RouterLoad` counts the tokens each router sent to each expert since the last update.
"""

from __future__ import annotations

import torch

from glmcheck.training.hooks import HookSet


class RouterLoad(HookSet):
    """Forward hooks on every `GlmMoeDsaTopkRouter` (modules with `e_score_correction_bias`)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.routers = [m for m in model.modules() if hasattr(m, "e_score_correction_bias") and hasattr(m, "top_k")]
        self.counts = {id(r): torch.zeros(r.num_experts, dtype=torch.float64) for r in self.routers}
        self.handles = [r.register_forward_hook(self._count) for r in self.routers]

    def _count(self, module, args, output):
        if not self.active:
            return
        chosen = output[2].detach().reshape(-1)
        self.counts[id(module)] += torch.bincount(chosen, minlength=module.num_experts).double().cpu()

    @torch.no_grad()
    def update(self, rate: float) -> float:
        """Move every bias by `rate` towards balance; returns the worst max/mean load seen (1 = even)."""
        worst = 1.0
        for router in self.routers:
            counts = self.counts[id(router)]
            if counts.sum() == 0:
                continue
            mean = counts.mean()
            worst = max(worst, (counts.max() / mean).item())
            step = torch.sign(mean - counts).to(router.e_score_correction_bias) * rate
            router.e_score_correction_bias += step
            counts.zero_()
        return worst

