"""GPU diagnostic: does keeping the KV rows resident in L2 change the ping-pong tile's time?

Usage (H200): PYTHONPATH=. python3 scripts/l2_window_probe.py [--seq-len 8192] [--heads 64 8]
At H = 64, 1 x 8192, Q and O stream ~1.1 GB through the 60 MB L2 while the gathers read 16.9 GB
from a 9.4 MB KV, and triton 3.6's cp.async drops the evict-last hint FlashMLA gathers with
(docs/performance.md, notes 57 and 67). This script marks the KV bytes as persisting in L2 with a
CUDA access-policy window on the current stream (cudaStreamSetAttribute through the CUDA runtime,
after cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)), gates the default tile, then times it
alternately without and with the window (ROUNDS rounds, medians). A speed-up says the gathers
miss L2; none says their latency is not L2 eviction. GPU run 19 (call 1, docs/performance.md
note 68): 0.997x at H = 64 and 1.001x at union 8, so the gathers do not miss L2. The window is
cleared before the script ends.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys

STREAM_ATTR_ACCESS_POLICY_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow
LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cudaLimitPersistingL2CacheSize
DEV_ATTR_MAX_PERSISTING_L2_CACHE_SIZE = 108  # cudaDevAttrMaxPersistingL2CacheSize
ACCESS_NORMAL, ACCESS_STREAMING, ACCESS_PERSISTING = 0, 1, 2  # cudaAccessProperty
ATTR_VALUE_BYTES = 64  # sizeof(cudaStreamAttrValue), a union; the window is its first member
ROUNDS = 3


def access_policy_window(base: int, num_bytes: int, hit_ratio: float = 1.0) -> bytes:
    """The cudaStreamAttrValue bytes of a window over [base, base + num_bytes) whose hits persist
    and whose misses stream: cudaAccessPolicyWindow {void *base_ptr; size_t num_bytes; float
    hitRatio; cudaAccessProperty hitProp, missProp;}, zero padded to the union's 64 bytes.
    num_bytes 0 gives the empty window (clears the attribute)."""
    if base < 0 or num_bytes < 0:
        raise ValueError(f"base and num_bytes must be >= 0, got {base} and {num_bytes}")
    if not 0.0 <= hit_ratio <= 1.0:
        raise ValueError(f"hit_ratio must be in [0, 1], got {hit_ratio}")
    value = bytearray(ATTR_VALUE_BYTES)
    if num_bytes:
        ctypes.c_uint64.from_buffer(value, 0).value = base
        ctypes.c_uint64.from_buffer(value, 8).value = num_bytes
        ctypes.c_float.from_buffer(value, 16).value = hit_ratio
        ctypes.c_int.from_buffer(value, 20).value = ACCESS_PERSISTING
        ctypes.c_int.from_buffer(value, 24).value = ACCESS_STREAMING
    return bytes(value)


def load_cudart(search: list[str]) -> ctypes.CDLL:
    """The CUDA runtime library torch was built with (nvidia/cuda_runtime wheels, torch/lib), or
    the system's; OSError naming the places searched when there is none."""
    patterns = ("nvidia/cuda_runtime/lib/libcudart.so*", "nvidia/cu*/lib/libcudart.so*", "libcudart.so*")
    for root in search:
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(root, pattern))):
                return ctypes.CDLL(path)
    try:
        return ctypes.CDLL("libcudart.so")
    except OSError as error:
        raise OSError(f"no libcudart found under {search} or on the loader path") from error


def set_window(runtime: ctypes.CDLL, stream: int, value: bytes) -> None:
    """cudaStreamSetAttribute(stream, AccessPolicyWindow, value); RuntimeError on an error code."""
    buffer = ctypes.create_string_buffer(value, ATTR_VALUE_BYTES)
    code = runtime.cudaStreamSetAttribute(ctypes.c_void_p(stream), STREAM_ATTR_ACCESS_POLICY_WINDOW, buffer)
    if code:
        raise RuntimeError(f"cudaStreamSetAttribute returned {code}")


def reserve_persisting_l2(runtime: ctypes.CDLL, num_bytes: int) -> int:
    """Ask for num_bytes of persisting L2 (capped by the device); returns what was granted."""
    most = ctypes.c_int(0)
    runtime.cudaDeviceGetAttribute(ctypes.byref(most), DEV_ATTR_MAX_PERSISTING_L2_CACHE_SIZE, 0)
    code = runtime.cudaDeviceSetLimit(LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(min(num_bytes, most.value)))
    if code:
        raise RuntimeError(f"cudaDeviceSetLimit(persisting L2) returned {code}")
    granted = ctypes.c_size_t(0)
    runtime.cudaDeviceGetLimit(ctypes.byref(granted), LIMIT_PERSISTING_L2_CACHE_SIZE)
    return granted.value


def probe_point(runtime: ctypes.CDLL, seq_len: int, heads: int) -> bool:
    """Gate the default tile at one point, then time it without and with the KV window; False when
    the gate fails."""
    import torch
    from pingpong_probe import (  # scripts/ is on sys.path
        PINGPONG,
        check_pingpong,
        probe_sets,
    )

    from glmcheck.bench import time_ms
    from glmcheck.kernels.union_ws_launch import launch_union_attention_ws

    point = probe_sets(seq_len, heads)
    out = None if point is None else check_pingpong(point, PINGPONG)
    if out is None:
        return False
    kv = point.args.kv
    kv_bytes = kv.numel() * kv.element_size()
    granted = reserve_persisting_l2(runtime, kv_bytes)
    stream = torch.cuda.current_stream().cuda_stream
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(ROUNDS):
            for on in (False, True):
                set_window(runtime, stream, access_policy_window(kv.data_ptr(), kv_bytes if on else 0))
                times[on].append(time_ms(lambda: launch_union_attention_ws(
                    point.args, point.sets, out, point.scale, point.kv_int64, PINGPONG)))
    finally:
        set_window(runtime, stream, access_policy_window(0, 0))
    without, with_window = (sorted(times[on])[ROUNDS // 2] for on in (False, True))
    print(f"{point.label}: KV {kv_bytes / 2**20:.1f} MiB, persisting L2 granted {granted / 2**20:.1f} MiB; "
          f"without window {without:.3f} ms, with {with_window:.3f} ms ({without / with_window:.3f}x); "
          f"rounds {times}", flush=True)
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, nargs="+", default=[8192])
    parser.add_argument("--heads", type=int, nargs="+", default=[64, 8])
    ns = parser.parse_args()
    import torch
    from pingpong_probe import run_points  # scripts/ is on sys.path

    runtime = load_cudart(sys.path + [os.path.join(os.path.dirname(torch.__file__), "lib")])
    return run_points(ns.seq_len, ns.heads, lambda seq_len, heads: probe_point(runtime, seq_len, heads))


if __name__ == "__main__":
    raise SystemExit(main())
