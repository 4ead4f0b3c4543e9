"""The model checks (layer0, logits, firsttoken, drift) and what they share: bands and gates
(`common`), the backend runner, fp64 capture hooks and the comparison metrics."""
