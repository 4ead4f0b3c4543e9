"""Mutation self-test: planted kernel faults that the accuracy suite must catch.

`mutants` holds the catalogue and builds mutated copies of `glmcheck.kernels`, `suite` the
small CPU-sized accuracy checks, `runner` runs the suite on the real kernels and every mutant.
"""
