"""The checks: layer0, logits, firsttoken (library API behind the CLI)."""
