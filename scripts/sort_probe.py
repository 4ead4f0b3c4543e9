"""torch.sort cost by key dtype and segment width (the union builds' first step).

Usage (GPU machine): PYTHONPATH=. python3 scripts/sort_probe.py
Keys are random rows of an 8192-row KV span (row*G + token for the merged widths), int32 as the
builds use them now and int16 (the same values, when they fit). Each int16 sort is checked equal
to the int32 sort before timing.
"""

from __future__ import annotations

import torch

from glmcheck.bench import time_ms


def main() -> None:
    torch.manual_seed(0)
    tokens, topk, span = 8192, 2048, 8192
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| shape | int32 ms | int16 ms | int16/int32 |")
    print("|---|---|---|---|")
    for group in (1, 2, 4):
        rows = torch.randint(0, span, (tokens, topk), device="cuda", dtype=torch.int32)
        keys32 = (rows * group + torch.arange(tokens, device="cuda", dtype=torch.int32)[:, None] % group)
        keys32 = keys32.reshape(tokens // group, group * topk).contiguous()
        keys32[:, -7:] = 32767  # empty-slot sentinel, sorts last
        keys16 = keys32.to(torch.int16)
        if not torch.equal(torch.sort(keys16, dim=1).values.to(torch.int32), torch.sort(keys32, dim=1).values):
            raise SystemExit(f"int16 sort differs at G={group}")
        t32 = time_ms(lambda: torch.sort(keys32, dim=1))
        t16 = time_ms(lambda: torch.sort(keys16, dim=1))
        print(f"| {list(keys32.shape)} | {t32:.3f} | {t16:.3f} | {t16 / t32:.2f} |", flush=True)


if __name__ == "__main__":
    main()
