"""Inputs: synthetic and captured top-k indices, random kernel inputs, prompts, tokenizers."""
