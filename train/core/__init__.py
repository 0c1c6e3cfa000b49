"""The machinery the training commands share: recipes, the embedded corpus, tokenizers, data loading, example
building, collators, batching, the engine, checkpoints and publishing a run. Nothing here is a command; the
commands are the modules of `train/` itself (`python -m train.<command>`)."""
