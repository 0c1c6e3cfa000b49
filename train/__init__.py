"""Lineage training. The modules of this package are the commands a user runs (`python -m train.<command>`):

- `main_job`: the seed papers' story at small scale, end to end;
- `pretrain_bert`, `pretrain_gpt`, `train_translation`: pretraining and translation;
- `finetune`: BERT or GPT on a downstream task;
- `train_tokenizer`: WordPiece, byte-level BPE or a shared seq2seq BPE;
- `export`, `attention_maps`, `benchmark`, `lineage_experiment`, `list_configs`: the other `lineage` commands
  (the table `train.cli.COMMANDS`).

The machinery they share lives in `train.data`, `train.run`, `train.setup` and `train.analysis` (recipes, data, example building, collators, batching, the
engine, checkpoints, publishing); offline metric modules in `train/metrics/`; the model presets, recipes and
accelerate configs, package data, in `train/configs/`. This file imports nothing, so
that `import train` stays cheap.
"""
