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
