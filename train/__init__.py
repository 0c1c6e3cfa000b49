"""Lineage training. The modules directly under this package are the commands a user runs (`python -m
train.<command>` = `lineage <command>`), each with a `main(argv)` and one row in the table `train.cli.COMMANDS`.

Below them, the machinery they share, in layers that each import only the layers below: `train.analysis` (what a
command measures or draws), `train.setup` (a run's model, tokenizer and splits from its recipe), `train.run` (the
recipe, the engine, checkpoints, the published folder) with `train.metrics` (offline `evaluate` modules), and
`train.data` (data from a source to a batch); `train/configs/` holds the presets, recipes and accelerate configs as
package data. The layers: docs/design.md, "Layers". This file imports nothing, so that `import train` stays cheap.
"""
