"""Training the trained models (ref-cpu, ref-gpu): GLM-MoE-DSA checkpoints that have learned language (the
corpus, the tokenizer, the DSA indexer's KL training, the loop, the export). Entry point:
`glmcheck.training.recipe.train_model`; CLI: `scripts/train_reference_model.py`."""
