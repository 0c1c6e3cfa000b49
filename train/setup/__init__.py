"""Setup of a run from a recipe: the model, the tokenizer, the data splits, LoRA. Imports run, metrics, data and
modeling only (docs/design.md, "Layers"); where a model comes from: docs/pretrained.md."""
