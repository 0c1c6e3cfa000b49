"""Setup of a run from a recipe: the model, the tokenizer, the data splits, LoRA."""
