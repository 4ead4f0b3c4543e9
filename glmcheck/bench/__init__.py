"""Kernel benchmarks on the GPU: correctness-gated kernel timings (`kernel`), whole-prefill latency
(`model`) and the machine's ceilings (`ceilings`)."""
