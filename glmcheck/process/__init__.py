"""How a glmcheck process runs, apart from what it checks: where its wall time goes (`phases`, `--profile`) and
where Python keeps its compiled bytecode (`bytecode`)."""
