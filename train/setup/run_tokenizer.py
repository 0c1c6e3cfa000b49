"""The tokenizer of a run: `get_tokenizer(recipe, family, texts, source, run=run)`, for the model the command resolved.

A pretrained source's own tokenizer (or `recipe.tokenizer`, checked against it), completed with the tokens Lineage's
templates need (`pretrained_tokenizer`); else `recipe.tokenizer`, completed so too, or one trained on the data (or
reused from the tokenizer cache: `corpus_tokenizer`), which is kept in the run's `<output_dir>/tokenizer` and reused
on resume. A pretrained model is never paired with a freshly trained vocabulary. docs/training.md ("Tokenizers"),
docs/pretrained.md ("The checkpoint's own tokenizer").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import transformers
from accelerate import PartialState

from train.data.tokenization import (
    canonical_family,
    complete_for_family,
    load_tokenizer,
    only_special_tokens,
    reused_or_trained,
    vocabulary_mismatch,
)
from train.run.distributed import one_process_first
from train.run.recipes import Recipe
from train.run.run_folder import Run
from train.setup.models import ModelSource, ModelSourceError


def pretrained_tokenizer(source: ModelSource, tokenizer: str | None = None, templates: bool = True):
    """The tokenizer of a pretrained source (or `tokenizer`, the recipe key, checked against the checkpoint's),
    with the special tokens and templates the family's tasks need added (`templates`: GPT's classification
    templates; False for causal-LM training, which needs only a pad and an end-of-text token). Either is refused when
    its vocabulary, not counting the tokens added to it, is larger than the model's embedding (`vocabulary_mismatch`);
    added tokens past it get rows (`models.fit_embeddings`)."""
    own = own_tokenizer(source.folder)
    mismatch = None if own is None else vocabulary_mismatch(own, None, source.config.vocab_size)
    if mismatch is not None:
        raise ModelSourceError(f"--model {source.name!r}: the tokenizer saved with it does not fit the model: "
                               f"{mismatch}; it is not the tokenizer the model was trained with: save that one in the "
                               "folder")
    if tokenizer is not None:
        if not Path(tokenizer).exists():
            raise ModelSourceError(f"recipe key 'tokenizer': folder {tokenizer!r} does not exist")
        chosen = load_tokenizer(tokenizer, argument="recipe key 'tokenizer'")
        mismatch = vocabulary_mismatch(chosen, own, source.config.vocab_size)
        if mismatch is not None:
            remedy = ("leave 'tokenizer' unset to use the checkpoint's own" if own is not None
                      else "it is not this checkpoint's")
            raise ModelSourceError(f"recipe key 'tokenizer': {tokenizer!r} does not match the vocabulary of --model "
                                   f"{source.name!r}: {mismatch}; {remedy}")
    elif own is None:
        raise ModelSourceError(
            f"--model {source.name!r} has no tokenizer files (tokenizer.json, vocab.txt, ...) with a vocabulary "
            "(transformers would make a tokenizer of its special tokens only): a pretrained model is never paired with "
            "a freshly trained vocabulary; give the checkpoint's tokenizer with --tokenizer FOLDER")
    else:
        chosen = own
    return _completed(chosen, source.family, templates, f"the checkpoint's {type(chosen).__name__}")


def _completed(tokenizer, family: str, templates: bool, whose: str):
    """`tokenizer` with the special tokens and templates `family`'s tasks need added (`complete_for_family`), what
    was added printed as added to `whose` tokenizer."""
    before = len(tokenizer)
    added = complete_for_family(tokenizer, family, templates)
    if added:
        PartialState().print(f"tokenizer: added {' '.join(added)} to {whose} ({before} -> {len(tokenizer)} tokens)")
    return tokenizer


def own_tokenizer(folder: Path):
    """The tokenizer saved in a model folder, or None when it has none, or only one of special tokens (which
    transformers 5.24 builds from `config.json` for a folder without tokenizer files: `only_special_tokens`)."""
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError):
        return None
    return None if only_special_tokens(tokenizer) else tokenizer


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model")


def get_tokenizer(recipe: Recipe, family: str, texts: Callable[[], Iterable[str]], source: ModelSource,
                  templates: bool = True, data_key: str | None = None, *, run: Run | None = None):
    """The run's tokenizer for the model `source` (the command's `models.model_source`; `corpus_tokenizer`). One
    trained here is kept in the folder of `run` (`train.run.run_folder.start_run`: needed unless the tokenizer is a
    pretrained source's or `recipe.tokenizer`), and reused on resume (training is reproducible, but the data a resumed
    run reads could have changed since)."""
    if source.pretrained or recipe.tokenizer:
        return corpus_tokenizer(recipe, family, texts, source, templates)
    if run is None:
        raise TypeError("get_tokenizer trains a tokenizer for the run and keeps it in its folder: pass run= (the Run "
                        "that train.run.run_folder.start_run yields)")
    trained = run.folder / "tokenizer"
    with one_process_first() as main:  # one process trains (or finds the run's own), the others load its vocabulary
        # only the main process looks at the folder: every process enters this barrier, whatever it would find there
        if main and not (run.resume_from is not None and (trained / "tokenizer.json").is_file()):
            tokenizer = corpus_tokenizer(recipe, family, texts, source, templates, data_key)
            tokenizer.save_pretrained(trained)
            run.record("tokenizer")
        else:
            tokenizer = load_tokenizer(trained, family)
    return tokenizer


def corpus_tokenizer(recipe: Recipe, family: str, texts: Callable[[], Iterable[str]], source: ModelSource,
                     templates: bool = True, data_key: str | None = None):
    """The tokenizer a run of `recipe` uses, written nowhere but the tokenizer cache: a pretrained source's own,
    `recipe.tokenizer`, or one trained on `texts()` or reused from the cache (`tokenization.reused_or_trained`,
    keyed by `data_key` when the data has one: `token_store.data_key`)."""
    if source.pretrained:
        return pretrained_tokenizer(source, recipe.tokenizer, templates=templates)
    if recipe.tokenizer:
        if not Path(recipe.tokenizer).exists():
            raise FileNotFoundError(f"tokenizer folder {recipe.tokenizer!r} does not exist")
        folder = Path(recipe.tokenizer)
        if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise FileNotFoundError(f"recipe key 'tokenizer': folder {recipe.tokenizer!r} holds no tokenizer (none of "
                                    f"{', '.join(TOKENIZER_FILES)}); give a folder written by save_pretrained or "
                                    f"python -m train.train_tokenizer")
        chosen = load_tokenizer(recipe.tokenizer, argument="recipe key 'tokenizer'")
        # a new model is sized to it: the tokens a Lineage tokenizer holds are added, as to a checkpoint's (the folder
        # is left as it is; the run saves the tokenizer it trains with)
        return _completed(chosen, canonical_family(family), True, f"recipe key 'tokenizer' {recipe.tokenizer!r}")
    return reused_or_trained(family, texts, recipe.tokenizer_vocab_size, sample_size=recipe.tokenizer_train_size,
                             model_max_length=recipe.max_seq_length, data_key=data_key)


__all__ = ["corpus_tokenizer", "get_tokenizer", "own_tokenizer", "pretrained_tokenizer"]
