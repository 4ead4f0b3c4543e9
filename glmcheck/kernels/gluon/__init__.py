"""Warp-specialised Gluon tiles for Hopper (sm_90): the split and ping-pong 64-row union tiles and their launcher
(`launch`). They need triton.experimental.gluon as in triton 3.6 (3.9 renamed its cp.async copy; the launcher runs
them only on tested versions) and an sm_90 GPU: the CPU interpreter does not run Gluon, so CI compiles them
(scripts/gluon_compile_check.sh). The kernel modules import Gluon; the launcher imports them only when it launches.
"""
