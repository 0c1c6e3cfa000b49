"""A run checks before it trains what can be known then, and records what actually ran (issue 29): lengths against
the model's positions, the precision this machine runs, the Hub upload, the recipe's YAML, a writable output folder;
what data was trained on (one place: `Recipe.data_source`), a cut of the user's data only when the user asked for
it, a resume that cannot change the tokenizer, and a failing final evaluation that keeps the trained weights."""

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from train import pretrain_gpt
from train.run import engine as engine_module
from train.run import run_folder
from train.run.checkpoints import ResumeMismatchError, complete_checkpoints
from train.run.recipes import RecipeError, load_recipe, parse_overrides
from train.run.run_folder import OutputDirError
from train.run.run_log import check_tracker_login

torch.set_num_threads(1)
GPT = ["--recipe", "gpt-pretrain-tiny", "--progress_bar", "false", "--report_to", "none", "--max_steps", "2",
       "--tokenizer_vocab_size", "300"]


def gpt(out: Path, *extra: str):
    return pretrain_gpt.main([*GPT, "--output_dir", str(out), *extra])


def corpus(path: Path, lines: int = 120) -> Path:
    from train.data.corpus import default_corpus

    path.write_text("\n".join(default_corpus("documents", "train", 0, lines)["text"]) + "\n")
    return path


@pytest.mark.parametrize("argv, message", [
    (["--mixed_precision", "fp16"], r"recipe key 'mixed_precision' is fp16, which a CPU does not run .* use bf16"),
    (["--push_to_hub", "me/model"], r"recipe key 'push_to_hub' is 'me/model' but the Hub is switched off "
                                    r"\(HF_HUB_OFFLINE=1\)"),
    (["--push_to_hub", "a/b/c"], r"recipe key 'push_to_hub' is 'a/b/c', which is no Hub repo id"),
    (["--max_new_tokens", "64"], r"recipe key 'max_new_tokens' is 64 but the model has 64 positions.* \[1, 63\]"),
    (["--pad_to_multiple_of", "48"], r"recipe key 'pad_to_multiple_of' is 48: a batch of 64-token rows .* padded to "
                                     r"96, beyond the model's 64 positions"),
    (["--max_seq_length", "65"], r"recipe key 'max_seq_length' is 65 but the model has 64 positions"),
])
def test_refused_before_anything_is_written(tmp_path, argv, message):
    with pytest.raises(RecipeError, match=message):
        gpt(tmp_path / "run", *argv)
    assert not (tmp_path / "run").exists()


def test_samples_that_could_not_be_generated_are_refused_before_training(tmp_path):
    with pytest.raises(RecipeError, match=r"recipe key 'max_new_tokens' is 62: after training, the longest sample "
                                          r"prompt \(\d+ tokens, 'a much longer prompt"):
        gpt(tmp_path / "run", "--max_new_tokens", "62", "--sample_prompts", "[a much longer prompt than two tokens]")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_yaml_errors_name_the_file_or_the_argument_and_the_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: gpt-tiny\nlearning_rate: [1e-4\n")
    with pytest.raises(RecipeError, match=r"r.yaml: line 3, column 1 is not valid YAML"):
        load_recipe(recipe)
    with pytest.raises(RecipeError, match=r"--model_overrides: line 1, column \d+ is not valid YAML"):
        parse_overrides(["--model_overrides", "{hidden_size: 64"])


def test_a_read_only_output_dir_is_refused_naming_the_key(tmp_path, monkeypatch):
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    if os.geteuid() == 0:  # root writes anywhere: answer as the permission bits answer any other user
        monkeypatch.setattr(run_folder.os, "access", lambda path, mode: Path(path) != folder)
    with pytest.raises(OutputDirError, match=f"recipe key 'output_dir': {folder} is not writable by this user"):
        gpt(folder / "run")
    assert list(folder.iterdir()) == []
    folder.chmod(0o755)


def test_the_card_results_and_checkpoint_name_the_file_trained_on(tmp_path):
    data = corpus(tmp_path / "a.txt")
    _, folder = gpt(tmp_path / "run", "--train_file", str(data))
    card = (folder / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert metadata["datasets"] == [data.name] and "embedded" not in card and str(tmp_path) not in card
    assert json.loads((folder / "results.json").read_text())["dataset"] == str(data)
    state = json.loads((complete_checkpoints(tmp_path / "run" / "checkpoints")[-1] / "lineage_state.json").read_text())
    assert state["run"]["dataset"]["source"] == str(data)


def test_a_shipped_recipes_train_size_never_cuts_a_users_file(tmp_path, capsys):
    data = corpus(tmp_path / "a.txt", 150)  # the shipped recipe says train_size: 100
    results, _ = gpt(tmp_path / "all", "--train_file", str(data))
    assert f"{data}: using all 150 rows (the shipped recipe's train_size 100 sizes the embedded corpus" in (
        capsys.readouterr().out)
    gpt(tmp_path / "cut", "--train_file", str(data), "--train_size", "60")
    assert f"train_size 60: using the first 60 of the 150 rows of {data}" in capsys.readouterr().out
    own = tmp_path / "mine.yaml"
    own.write_text(f"model: gpt-tiny\ntrain_file: {data}\ntrain_size: 70\nmax_seq_length: 64\n")
    load_recipe(own)  # the user's own recipe file: its keys are the user's
    assert load_recipe(own).set_by_user >= {"train_size", "train_file"}
    assert "train_size" not in load_recipe("gpt-pretrain-tiny", {"max_steps": 3}).set_by_user


def test_a_resume_cannot_change_the_tokenizer_it_keeps(tmp_path):
    out = tmp_path / "run"
    gpt(out, "--save_steps", "1")
    record = (out / run_folder.RECORD).read_bytes()
    with pytest.raises(ResumeMismatchError, match=r"recipe key 'tokenizer_vocab_size' is 280 but the run was started "
                                                  r"with 300: .*keeps the tokenizer it trained"):
        gpt(out, "--resume_from_checkpoint", "latest", "--max_steps", "3", "--tokenizer_vocab_size", "280")
    assert (out / run_folder.RECORD).read_bytes() == record


def test_a_failing_final_evaluation_keeps_the_last_checkpoint_and_says_where(tmp_path, monkeypatch, capsys):
    def broken(self):
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(engine_module.Engine, "evaluate", broken)
    with pytest.raises(RuntimeError, match="the evaluation broke"):
        gpt(tmp_path / "run")
    assert "training failed in the final evaluation after step 2: RuntimeError" in capsys.readouterr().err
    assert [p.name for p in complete_checkpoints(tmp_path / "run" / "checkpoints")] == ["step-00000002"]
    with pytest.raises(OutputDirError, match="holds another run's files"):
        gpt(tmp_path / "run")


def test_a_hosted_tracker_without_a_login_is_refused_unless_it_logs_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    for key in ("WANDB_API_KEY", "WANDB_MODE", "COMET_API_KEY", "COMET_MODE", "NETRC"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RecipeError, match=r"recipe key 'report_to' names wandb, which has no login here .*"
                                          r"WANDB_MODE=offline"):
        check_tracker_login(["tensorboard", "wandb"])
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password key\n")
    (tmp_path / ".netrc").chmod(0o600)
    check_tracker_login(["wandb"])
    monkeypatch.setenv("COMET_MODE", "offline")
    check_tracker_login(["comet_ml", "tensorboard"])


# ----------------------------------------------------------------------------- a fresh hunt (issue 29's closing note)

def reviews(path: Path, labels: list) -> Path:
    path.write_text("".join(json.dumps({"text": f"review {i} was {'good' if y else 'bad'}", "label": y}) + "\n"
                            for i, y in enumerate(labels)))
    return path


def finetune_run(tmp_path: Path, *extra: str):
    from train.finetune import main

    return main(["--recipe", "bert-finetune-nli-tiny", "--task", "sequence-classification", "--progress_bar", "false",
                 "--report_to", "none", "--max_steps", "2", "--output_dir", str(tmp_path / "run"), *extra])


@pytest.mark.parametrize("files, message", [
    ((None, "dev.jsonl"), r"recipe key 'validation_file' is '.*dev.jsonl' but 'train_file' is not set: the run would "
                          r"train on 'embedded:nli' and evaluate on your file"),
    (("train.jsonl", "train.jsonl"), r"recipe keys 'train_file' and 'validation_file' both name '.*train.jsonl': the "
                                     r"evaluation figures would be figures on the training data"),
])
def test_data_splits_that_would_mislabel_the_figures_are_refused(tmp_path, files, message):
    reviews(tmp_path / "train.jsonl", [0, 1] * 8)
    reviews(tmp_path / "dev.jsonl", [1, 0] * 4)
    argv = [arg for key, name in zip(("--train_file", "--validation_file"), files) if name
            for arg in (key, str(tmp_path / name))]
    with pytest.raises(RecipeError, match=message):
        finetune_run(tmp_path, *argv)
    assert not (tmp_path / "run").exists()


def test_one_column_named_twice_and_a_config_for_no_hub_dataset_are_refused(tmp_path):
    data = reviews(tmp_path / "train.jsonl", [0, 1] * 8)
    with pytest.raises(RecipeError, match="recipe keys 'text_column' and 'label_column' both name the column 'label'"):
        finetune_run(tmp_path, "--train_file", str(data), "--text_column", "label")
    with pytest.raises(RecipeError, match=r"recipe key 'dataset_config' is 'wikitext-2-raw-v1', which selects a "
                                          r"configuration of a Hub dataset; this run reads 'embedded:documents'"):
        gpt(tmp_path / "gpt", "--dataset_config", "wikitext-2-raw-v1")
    assert not (tmp_path / "run").exists() and not (tmp_path / "gpt").exists()


def test_a_key_the_command_does_not_read_is_refused_when_the_user_sets_it(tmp_path):
    with pytest.raises(RecipeError, match=r"recipe key 'lora' is read by finetune only: pretrain_gpt would ignore it"):
        gpt(tmp_path / "run", "--lora", "{r: 4}")
    with pytest.raises(RecipeError, match=r"recipe key 'nsp' is read by pretrain_bert only"):
        gpt(tmp_path / "run", "--nsp", "false")
    with pytest.raises(RecipeError, match=r"recipe key 'sample_prompts': item 1 is int 1999; every prompt must be "
                                          r"non-empty text \(YAML reads a bare number as one: quote it\)"):
        gpt(tmp_path / "run", "--sample_prompts", "[Anna was born in, 1999]")
    assert not (tmp_path / "run").exists()


def test_a_tilde_in_a_path_key_means_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    gpt("~/runs/gpt")
    assert (tmp_path / "home" / "runs" / "gpt" / "model" / "config.json").is_file()
    assert not (tmp_path / "~").exists()


def test_overrides_that_would_drop_the_pretrained_weights_are_refused(tmp_path):
    _, folder = gpt(tmp_path / "pretrained")
    further = [*GPT[:GPT.index("--tokenizer_vocab_size")], "--model", str(folder)]  # its tokenizer: no vocab size

    def pretrained(out: Path, overrides: str):
        return pretrain_gpt.main([*further, "--output_dir", str(out), "--model_overrides", overrides])

    with pytest.raises(RecipeError, match=r"recipe key 'model_overrides': hidden_size=48 change the shapes of the "
                                          r"weights of the pretrained model .* initialized afresh instead of loaded"):
        pretrained(tmp_path / "run", "{hidden_size: 48}")
    pretrained(tmp_path / "dropout", "{hidden_dropout_prob: 0.0}")


def test_resume_latest_without_a_checkpoint_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(Exception, match="holds no complete checkpoint"):
        gpt(tmp_path / "run", "--resume_from_checkpoint", "latest")
    assert not (tmp_path / "run").exists()
