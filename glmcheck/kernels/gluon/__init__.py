"""The warp-specialised Gluon tile for Hopper (sm_90): the ping-pong 64-row union tile and its launcher
(`launch`). They need triton.experimental.gluon as in triton 3.6 (3.9 renamed its cp.async copy; the launcher runs
them only on tested versions) and an sm_90 GPU: the CPU interpreter does not run Gluon, so CI compiles them
(scripts/gluon_compile_check.sh). The kernel modules import Gluon; the launcher imports them only when it launches.
"""
