"""The data of a pretraining run, built the same way by the run and by `lineage prepare`: the documents as causal-LM
blocks (GPT, `pretrain_gpt`) or sentence pairs (BERT, `pretrain_bert`), whose store one process of each machine
prepares (once, where machines share the cache) while the others wait and then open it. docs/training.md
("Pretraining corpora: prepared once").
"""

from __future__ import annotations

from train.data.model_inputs import check_documents, prepare_causal_lm_dataset, prepare_nsp_dataset
from train.run.distributed import one_process_first
from train.run.recipes import Recipe
from train.setup.splits import load_splits

COMMANDS = {"gpt": "pretrain_gpt", "bert": "pretrain_bert"}  # family -> the command that pretrains it
COLUMN_ADVICE = "name the column of the documents with the recipe key text_column, or rename it"


def pretraining_documents(recipe: Recipe, family: str):
    """`(train, validation)` documents of the recipe (`load_splits`; validation None without), in a column `text`
    (the recipe's `text_column` of the data, when it names another), each refused for BERT when it gives no sentence
    pair (`check_documents`)."""
    column = recipe.text_column or "text"
    train_docs, eval_docs = load_splits(recipe, [(column, "text")], column_advice=COLUMN_ADVICE)
    if column != "text":  # the one column read, under the name the rest of the run reads
        train_docs, eval_docs = (docs.select_columns([column]).rename_column(column, "text") if docs is not None
                                 else None for docs in (train_docs, eval_docs))
    if family == "bert":
        check_documents(train_docs, recipe.data_source("train"))
        if eval_docs:
            check_documents(eval_docs, recipe.split_name("validation"))
    return train_docs, eval_docs


def _prepare(recipe: Recipe, family: str, tokenizer, documents, source: str, seed: int):
    if family == "gpt":
        return prepare_causal_lm_dataset(documents, tokenizer, recipe.max_seq_length,
                                         pack_documents=recipe.pack_documents, num_proc=recipe.num_proc, source=source)
    return prepare_nsp_dataset(documents, tokenizer, recipe.max_seq_length, seed=seed, next_sentence=recipe.nsp,
                               num_proc=recipe.num_proc, source=source)


def pretraining_data(recipe: Recipe, family: str, tokenizer, train_docs, eval_docs):
    """`(train, validation)` examples of the recipe's documents for `family` (validation None without documents)."""
    if family not in COMMANDS:
        raise ValueError(f"family {family!r} has no pretraining data; families: {', '.join(COMMANDS)}")
    with one_process_first(local=True):
        train = _prepare(recipe, family, tokenizer, train_docs, recipe.data_source("train"), recipe.seed)
        validation = (_prepare(recipe, family, tokenizer, eval_docs, recipe.split_name("validation"), recipe.seed + 1)
                      if eval_docs else None)
    return train, validation
