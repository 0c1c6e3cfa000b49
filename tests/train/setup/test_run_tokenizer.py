"""The run's tokenizer under several processes: `get_tokenizer`'s barrier is entered once by every process, whatever
each would find in the run's folder."""

from contextlib import contextmanager

import pytest

from train.run.recipes import recipe_from_dict
from train.run.run_folder import Run
from train.setup import run_tokenizer
from train.setup.models import resolve_model

TEXTS = ["the cat sat on the mat.", "a dog ran in the park.", "birds sing in the morning."] * 20


@pytest.mark.parametrize("main,kept", [(True, False), (True, True), (False, True)])
def test_every_process_enters_the_tokenizer_barrier_once_whatever_the_folder_holds(tmp_path, monkeypatch, main,
                                                                                   kept):
    """A resume into a folder without the run's tokenizer (a checkpoint copied into a fresh folder): the main process
    trains and saves one while the others wait. A process that looked at the folder only after the save skipped the
    barrier, so every later barrier paired with the wrong one (seen once as a ZeRO-3 resume hanging in CI)."""
    recipe = recipe_from_dict({"model": "bert-tiny", "output_dir": str(tmp_path), "tokenizer_vocab_size": 120})
    source = resolve_model("bert-tiny")
    if kept:
        run_tokenizer.get_tokenizer(recipe, "bert", lambda: TEXTS, source, run=Run(recipe, tmp_path, owner=True))
    entered = []

    @contextmanager
    def one_process_first():
        entered.append(main)
        yield main

    monkeypatch.setattr(run_tokenizer, "one_process_first", one_process_first)
    run = Run(recipe, tmp_path, owner=main, resume_from=tmp_path / "checkpoints" / "step-00000002")
    tokenizer = run_tokenizer.get_tokenizer(recipe, "bert", lambda: TEXTS, source, run=run)
    assert entered == [main]
    assert (tmp_path / "tokenizer" / "tokenizer.json").is_file()
    assert tokenizer("the cat sat")["input_ids"][0] == tokenizer.cls_token_id


def _own_tokenizer(folder, **roles):
    """A byte-level BPE trained with `tokenizers` and saved by transformers, as a user brings one: the `roles` its
    config names (GPT-2's: an end-of-text token, no pad), none of Lineage's template tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.ByteLevel(), decoders.ByteLevel()
    backend.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=300, special_tokens=[*roles.values()],
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=backend, **roles).save_pretrained(folder)
    return len(backend.get_vocab())


def test_a_users_own_tokenizer_for_a_new_model_gets_lineages_tokens_and_its_folder_is_left_as_it_is(tmp_path,
                                                                                                    capsys):
    """`--tokenizer` of a GPT-2-style tokenizer (an end-of-text token, no pad) for a new GPT, and of one with no BERT
    tokens for a new BERT: the tokens Lineage's templates need are added and said, as to a checkpoint's tokenizer,
    and the model is sized to it (before: refused, 'has no pad_token (a gpt model needs one, e.g. '[PAD]')')."""
    from train import pretrain_gpt
    from train.data.tokenization import config_kwargs_from_tokenizer

    folder = tmp_path / "own"
    size = _own_tokenizer(folder, eos_token="<|endoftext|>")
    recipe = recipe_from_dict({"model": "gpt-tiny", "output_dir": str(tmp_path / "gpt"), "tokenizer": str(folder)})
    tokenizer = run_tokenizer.corpus_tokenizer(recipe, "gpt", lambda: TEXTS, resolve_model("gpt-tiny"))
    assert len(tokenizer) == size + 4 and config_kwargs_from_tokenizer(tokenizer, "gpt")["vocab_size"] == size + 4
    assert (tokenizer.pad_token, tokenizer.bos_token) == ("[PAD]", "<|endoftext|>")
    assert (f"tokenizer: added [PAD] [START] [DELIM] [EXTRACT] to recipe key 'tokenizer' '{folder}' ({size} -> "
            f"{size + 4} tokens)") in capsys.readouterr().out
    recipe = recipe_from_dict({"model": "bert-tiny", "output_dir": str(tmp_path / "bert"), "tokenizer": str(folder)})
    bert = run_tokenizer.corpus_tokenizer(recipe, "bert", lambda: TEXTS, resolve_model("bert-tiny"))
    assert bert.convert_ids_to_tokens(bert("a cat", "a dog")["input_ids"])[0] == "[CLS]"
    assert config_kwargs_from_tokenizer(bert, "bert")["vocab_size"] == size + 5  # + [PAD] [UNK] [CLS] [SEP] [MASK]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"{text} Line {i} of the corpus.\n" for i, text in enumerate(TEXTS)))
    out = tmp_path / "run"
    pretrain_gpt.main(["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus), "--tokenizer", str(folder),
                       "--max_seq_length", "16", "--max_steps", "1", "--progress_bar", "false", "--report_to", "none",
                       "--output_dir", str(out)])
    assert len(_saved(out / "model")) == size + 4 and len(_saved(folder)) == size  # the user's folder as it was


def _saved(folder):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast.from_pretrained(folder)
