"""The run: recipes, the engine, optimization, evaluation, checkpoints, output folders, logging, publishing, the
environment. Imports data and modeling only (docs/design.md, "Layers"); what a run does: docs/training.md."""
