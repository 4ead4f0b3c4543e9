"""How a glmcheck process runs, apart from what it checks: interpreter or GPU (`triton_mode`), signals
(`interrupts`), how errors name arguments (`wording`), where its wall time goes (`phases`, `--profile`) and how it
ends (`fast_exit`); what git says of the checkout it runs from (`git`)."""
