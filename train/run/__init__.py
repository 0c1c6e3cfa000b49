"""The run: recipes, the engine, optimization, evaluation, checkpoints, output folders, logging, publishing."""
