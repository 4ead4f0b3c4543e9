"""Task-accuracy checks: per-question correctness of a reference and a candidate server on benchmark tasks
(lm-evaluation-harness) and the statistics that judge them. Import the submodules directly; this package
imports nothing."""
