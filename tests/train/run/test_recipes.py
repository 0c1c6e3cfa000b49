"""Recipes: YAML loading, command-line overrides, and the errors for unknown keys, wrong types and missing presets."""

import dataclasses
from pathlib import Path

import pytest

from train.run.recipes import (
    BUNDLED,
    Recipe,
    RecipeError,
    bundled,
    check_command_keys,
    load_recipe,
    parse_args,
    parse_overrides,
    recipe_from_dict,
    valid_keys,
)
from train.setup.presets import available_presets

CONFIGS = Path(__file__).resolve().parents[3] / "train" / "configs"
RECIPES = sorted((CONFIGS / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_shipped_recipe_loads_and_names_an_existing_preset(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a name is found from any working directory
    recipe = load_recipe(path.stem)
    assert recipe == load_recipe(path)  # by name or by path: the same file
    assert isinstance(recipe, Recipe)
    # a preset, the output folder of an earlier step (main-*-nli fine-tune main-*-pretrain's model), or a Hub id
    assert (recipe.model in available_presets() or recipe.model.startswith("outputs/")
            or recipe.model == "google-bert/bert-base-uncased")


def test_overrides_both_forms_and_yaml_values(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: bert-tiny\nlearning_rate: 1e-4\nmax_steps: 5\n")
    recipe = parse_args(["--recipe", str(path), "--max_steps", "7", "--set", "nsp=false",
                         "--model_overrides", "{hidden_dropout_prob: 0.0}", "--warmup_steps=3"])
    assert recipe.learning_rate == 1e-4  # YAML 1.1 reads 1e-4 as a string; float fields accept it
    assert (recipe.max_steps, recipe.nsp, recipe.warmup_steps) == (7, False, 3)
    assert recipe.model_overrides == {"hidden_dropout_prob": 0.0}
    assert parse_overrides(["--output-dir", "x"]) == {"output_dir": "x"}


def test_unknown_key_lists_the_valid_ones(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: bert-tiny\nlearning_rat: 0.1\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert "'learning_rat'" in str(err.value) and "learning_rate" in str(err.value)
    assert all(key in str(err.value) for key in valid_keys())
    with pytest.raises(RecipeError, match="unknown recipe key.*'bogus'"):
        load_recipe(None, {"bogus": 1})


def test_wrong_type_names_key_expected_and_got():
    with pytest.raises(RecipeError, match=r"'max_steps' expects int, got str 'ten'"):
        load_recipe(None, {"max_steps": "ten"})
    with pytest.raises(RecipeError, match=r"'nsp' expects bool, got int 3"):
        load_recipe(None, {"nsp": 3})
    with pytest.raises(RecipeError, match=r"'learning_rate' expects float, got list"):
        load_recipe(None, {"learning_rate": [1]})
    with pytest.raises(RecipeError, match="lr_scheduler.*linear, cosine, inverse_sqrt"):
        load_recipe(None, {"lr_scheduler": "step"})
    with pytest.raises(RecipeError, match="recipe key 'beam_search' must be one of transformers, gnmt, got 'GNMT'"):
        load_recipe(None, {"beam_search": "GNMT"})


@pytest.mark.parametrize("kind", BUNDLED)
def test_bundled_configs_are_every_file_of_their_package_folder(kind):
    names = {p.name.removesuffix(BUNDLED[kind]) for p in (CONFIGS / kind).iterdir()}
    assert list(bundled(kind)) == sorted(names) and len(names) >= 3
    assert all(file.is_file() for file in bundled(kind).values())
    with pytest.raises(ValueError, match="unknown config kind 'model'; kinds: models, recipes, accelerate"):
        bundled("model")


def test_a_file_given_by_path_wins_over_a_recipe_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bert-pretrain-tiny").write_text("max_steps: 7\n")
    assert load_recipe("bert-pretrain-tiny").max_steps == 7


@pytest.mark.parametrize("arm", ["transformer", "transformer-relative", "rnn-none", "rnn-bahdanau", "rnn-luong"])
def test_an_experiment_recipe_still_loads_by_its_old_name_with_a_warning(arm):
    with pytest.warns(FutureWarning, match=f"recipe 'lineage-{arm}' is now called 'experiment-{arm}'"):
        old = load_recipe(f"lineage-{arm}")
    assert old == load_recipe(f"experiment-{arm}")


def test_missing_recipe():
    with pytest.raises(FileNotFoundError, match="recipe 'nope' is neither a file nor a recipe name; recipe names: "
                                                ".*bert-pretrain-tiny"):
        load_recipe("nope")


def test_recipe_round_trips_through_yaml(tmp_path):
    recipe = load_recipe(None, {"max_steps": 3, "sample_prompts": ["Anna"]})
    recipe.save(tmp_path / "saved.yaml")
    assert load_recipe(tmp_path / "saved.yaml") == recipe


def test_mixed_precision_no_is_the_word_not_a_boolean(tmp_path):
    """YAML reads a bare `no` as false; `mixed_precision: no` is Accelerate's full precision, in a file and on the
    command line alike, while `yes` stays refused."""
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text("model: gpt-tiny\nmixed_precision: no\n")
    assert load_recipe(recipe_file).mixed_precision == "no"
    assert parse_args(["--recipe", "gpt-pretrain-tiny", "--mixed_precision", "no"], "gpt-pretrain-tiny",
                      "x").mixed_precision == "no"
    with pytest.raises(RecipeError, match="recipe key 'mixed_precision' expects str, got bool True"):
        parse_args(["--recipe", "gpt-pretrain-tiny", "--mixed_precision", "yes"], "gpt-pretrain-tiny", "x")


@pytest.mark.parametrize(("keys", "named"), [({"max_steps": -1, "num_train_epochs": 1}, "'max_steps' is -1"),
                                             ({"max_steps": 2, "dataloader_num_workers": 1},
                                              "'dataloader_num_workers' is 1")])
def test_a_streamed_recipe_that_cannot_train_from_a_stream_is_refused_when_built(keys, named):
    recipe_from_dict(keys)  # the same keys without streaming make a recipe
    with pytest.raises(RecipeError, match=f"recipe key 'streaming' is true but {named}"):
        recipe_from_dict({**keys, "streaming": True})


def test_max_query_length_is_berts_64_by_default_a_positive_count_and_finetunes_only():
    """BERT's run_squad.py cuts every question to 64 word pieces (its flag max_query_length)."""
    assert recipe_from_dict({}).max_query_length == 64
    with pytest.raises(RecipeError, match=r"recipe key 'max_query_length' must be in \[1, inf\), got 0"):
        recipe_from_dict({"max_query_length": 0})
    with pytest.raises(RecipeError, match="recipe key 'max_query_length' is read by finetune only"):
        parse_args(["--max_query_length", "32"], command="pretrain_bert")


def test_max_query_length_set_for_a_task_other_than_question_answering_is_refused_naming_the_task_it_is_read_by():
    """A classifier's run ignored it while its recipe.yaml recorded it; a recipe's own value (not the user's) stays."""
    refusal = ("recipe key 'max_query_length' is read by finetune's task question-answering only, not by its task "
               "'nli': finetune would ignore it, and its recipe.yaml would show it as used; drop it")
    with pytest.raises(RecipeError) as refused:
        parse_args(["--recipe", "bert-finetune-nli-tiny", "--max_query_length", "32"], command="finetune")
    assert str(refused.value) == refusal
    assert parse_args(["--recipe", "bert-finetune-nli-tiny", "--task", "question-answering", "--max_query_length",
                       "32"], command="finetune").max_query_length == 32
    unset = recipe_from_dict({"task": "nli", "max_query_length": 32}, user_keys=())  # as a shipped recipe's keys
    check_command_keys(unset, "finetune", "")


def test_doc_stride_is_unset_by_default_a_count_from_zero_and_question_answerings_only():
    """Unset, windows overlap by a quarter of their length as before the key; bert-base-squad takes run_qa.py's 128."""
    assert recipe_from_dict({}).doc_stride is None and recipe_from_dict({"doc_stride": 0}).doc_stride == 0
    assert load_recipe("bert-base-squad").doc_stride == 128
    with pytest.raises(RecipeError, match=r"recipe key 'doc_stride' must be in \[0, inf\), got -1"):
        recipe_from_dict({"doc_stride": -1})
    with pytest.raises(RecipeError, match="recipe key 'doc_stride' is read by finetune only"):
        parse_args(["--doc_stride", "32"], command="pretrain_bert")
    with pytest.raises(RecipeError, match="recipe key 'doc_stride' is read by finetune's task question-answering "
                                          "only, not by its task 'nli'"):
        parse_args(["--recipe", "bert-finetune-nli-tiny", "--doc_stride", "32"], command="finetune")
    assert parse_args(["--recipe", "bert-finetune-nli-tiny", "--task", "question-answering", "--doc_stride", "32"],
                      command="finetune").doc_stride == 32


def test_null_score_diff_threshold_is_zero_by_default_any_finite_number_and_question_answerings_only():
    """run_qa.py's default, 0.0; a NaN or infinite threshold is refused, as words or as YAML's numbers."""
    assert recipe_from_dict({}).null_score_diff_threshold == 0.0
    assert recipe_from_dict({"null_score_diff_threshold": -3}).null_score_diff_threshold == -3.0
    for value in (".nan", ".inf", "-.inf"):
        with pytest.raises(RecipeError, match=r"^recipe key 'null_score_diff_threshold' must be in \(-inf, inf\), "
                                              r"got -?(nan|inf)$"):
            load_recipe(None, parse_overrides(["--null_score_diff_threshold", value]))
    for value in ("nan", "-inf", "Infinity"):
        with pytest.raises(RecipeError, match=f"^recipe key 'null_score_diff_threshold' expects a finite number, "
                                              f"got '{value}'$"):
            load_recipe(None, parse_overrides(["--null_score_diff_threshold", value]))
    with pytest.raises(RecipeError, match="recipe key 'null_score_diff_threshold' is read by finetune only"):
        parse_args(["--null_score_diff_threshold", "1"], command="pretrain_bert")
    with pytest.raises(RecipeError, match="recipe key 'null_score_diff_threshold' is read by finetune's task "
                                          "question-answering only, not by its task 'nli'"):
        parse_args(["--recipe", "bert-finetune-nli-tiny", "--null_score_diff_threshold", "1"], command="finetune")
    assert parse_args(["--recipe", "bert-finetune-nli-tiny", "--task", "question-answering",
                       "--null_score_diff_threshold", "-1.5"], command="finetune").null_score_diff_threshold == -1.5


def test_a_shipped_recipe_of_another_command_is_refused_naming_its_command_and_each_runs_its_own():
    """`lineage prepare --recipe bert-finetune-nli-tiny` prepared a pretraining store no fine-tuning run reads, and
    `pretrain_bert` trained on it silently: a shipped recipe that sets a key only other commands read is theirs."""
    from train import prepare

    with pytest.raises(RecipeError, match="recipe 'bert-finetune-nli-tiny' is a recipe of finetune \\(it sets task\\), "
                                          "not of pretrain_bert: give a recipe of pretrain_bert"):
        prepare.main(["--recipe", "bert-finetune-nli-tiny"])
    with pytest.raises(RecipeError, match="is a recipe of pretrain_bert \\(it sets nsp\\), not of "
                                          "finetune"):
        parse_args(["--recipe", "bert-pretrain-tiny"], command="finetune")
    own = {"bert-finetune-nli-tiny": "finetune", "gpt-pretrain-tiny": "pretrain_gpt",
           "bert-pretrain-tiny": "pretrain_bert", "transformer-translation-tiny": "train_translation"}
    for name, command in own.items():
        assert parse_args(["--recipe", name, "--max_steps", "3"], command=command).shipped[0] == name
    assert parse_args(["--recipe", "bert-finetune-nli-tiny", "--task", "nli"], command="finetune").task == "nli"


@pytest.mark.parametrize("key", [f.name for f in dataclasses.fields(Recipe) if f.type in ("float", "float | None")])
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_every_number_key_refuses_yamls_nan_and_infinities_naming_its_range(key, value):
    """YAML reads .nan and .inf as numbers, which no comparison of a range refuses by itself."""
    with pytest.raises(RecipeError, match=rf"^recipe key '{key}' must be in [\[(].*, got -?(nan|inf)$"):
        load_recipe(None, parse_overrides([f"--{key}", value]))
