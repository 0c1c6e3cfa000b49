"""Prepare a pretraining corpus once: tokenize it with every core into the store that later runs reuse.

    lineage prepare --recipe gpt-pretrain-tiny --train_file corpus.txt --num_proc 8
    lineage prepare --recipe bert-pretrain-tiny --train_file wiki.txt --validation_file held-out.txt
    lineage train pretrain_gpt --recipe gpt-pretrain-tiny --train_file corpus.txt     # opens the store

It takes the recipe of the pretraining run it prepares for (the model's family says which: `pretrain_gpt` or
`pretrain_bert`), resolves the run's tokenizer as the run will, and writes the splits' stores
(`train.data.token_store`) into the cache; nothing is written into `output_dir`. docs/training.md ("Pretraining
corpora: prepared once").
"""

from __future__ import annotations

from accelerate.utils import set_seed

from train.cli import run_script
from train.data.token_store import data_key
from train.run.recipes import RecipeError, check_command_keys, parse_args
from train.setup.models import model_source
from train.setup.pretraining import COMMANDS, pretraining_data, pretraining_documents
from train.setup.run_tokenizer import corpus_tokenizer
from train.setup.splits import column_texts

EXAMPLE_RECIPES = ("gpt-pretrain-tiny", "bert-pretrain-tiny")  # what the error names


# the store is the one a pretraining run opens, so it is prepared from that run's recipe; the bare defaults
# (bert-tiny's 64 positions, max_seq_length 128) are no run's
NO_RECIPE = ("lineage prepare needs --recipe: the recipe of the pretraining run it prepares for (a shipped one, "
             f"{' or '.join(EXAMPLE_RECIPES)}, every one listed by `lineage configs recipes`, or your YAML file) with "
             "the same keys, so that the run opens the store it writes")


def main(argv: list[str] | None = None):
    recipe = parse_args(argv, None, __doc__.splitlines()[0], recipe_required=NO_RECIPE).reading("embedded:documents")
    if recipe.streaming:
        raise RecipeError("recipe key 'streaming' is true: a stream is read as the run trains, never prepared; "
                          "drop streaming to prepare the corpus")
    set_seed(recipe.seed)
    source = model_source(recipe, "prepare", tuple(COMMANDS))
    command = COMMANDS[source.family]
    check_command_keys(recipe, command, f"; this recipe prepares for {command} ({recipe.model!r} is a "
                                        f"{source.family} model): drop it")
    train_docs, eval_docs = pretraining_documents(recipe, source.family)
    tokenizer = corpus_tokenizer(recipe, source.family, lambda: column_texts(train_docs), source,
                                 templates=source.family == "bert", data_key=data_key(train_docs, ["text"]))
    return pretraining_data(recipe, source.family, tokenizer, train_docs, eval_docs)


if __name__ == "__main__":
    run_script(main)
