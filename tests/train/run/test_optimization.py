"""AdamW parameter groups and the learning-rate schedules (the Transformer paper's inverse square root exactly)."""

import pytest
import torch

from train.run.optimization import build_optimizer, parameter_groups, schedule_lambda
from train.run.recipes import Recipe, parse_args


def test_parameter_groups_exclude_biases_and_norms_from_decay():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Embedding(5, 4))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {p.ndim for p in decay["params"]} == {2} and len(decay["params"]) == 2
    assert {p.ndim for p in no_decay["params"]} == {1} and len(no_decay["params"]) == 3


def test_schedules():
    linear = schedule_lambda("linear", 10, 110)
    assert linear(0) == pytest.approx(0.1) and linear(9) == pytest.approx(1.0)
    assert linear(60) == pytest.approx(0.5) and linear(110) == 0.0
    cosine = schedule_lambda("cosine", 10, 110)
    assert cosine(9) == pytest.approx(1.0) and cosine(60) == pytest.approx(0.5) and cosine(110) == pytest.approx(0.0)
    inv = schedule_lambda("inverse_sqrt", 4000, 100_000, d_model=512)
    paper = lambda step: 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)  # noqa: E731
    for step in (1, 100, 3999, 4000, 4001, 50_000):
        assert inv(step - 1) == pytest.approx(paper(step))
    assert max(range(1, 10_000), key=lambda s: inv(s - 1)) == 4000


@pytest.mark.parametrize("argv, betas, eps", [
    ([], (0.9, 0.98), 1e-9),  # the paper's, recorded in the recipe
    (["--adam_beta2", "0.997", "--adam_epsilon", "1e-6"], (0.9, 0.997), 1e-6),  # the user's win
    (["--lr_scheduler", "linear"], (0.9, 0.999), 1e-8),
])
def test_inverse_sqrt_takes_the_papers_adam_where_the_recipe_names_no_other(argv, betas, eps):
    recipe = parse_args(["--recipe", "transformer-translation-tiny", *argv], command="train_translation")
    assert (recipe.adam_beta1, recipe.adam_beta2) == betas and recipe.adam_epsilon == eps
    paper, _ = build_optimizer(torch.nn.Linear(4, 4), recipe, 100, d_model=512)
    assert paper.defaults["betas"] == betas and paper.defaults["eps"] == eps


def test_a_linear_schedule_warms_up_with_the_recipes_adam():
    model = torch.nn.Linear(4, 4)
    recipe = Recipe(lr_scheduler="linear", adam_beta2=0.95, warmup_steps=10, learning_rate=1e-3)
    adam, schedule = build_optimizer(model, recipe, 100, d_model=512)
    assert adam.defaults["betas"] == (0.9, 0.95)
    assert adam.param_groups[0]["lr"] == pytest.approx(1e-4)  # the first step's rate: warmup 1/10


def test_warmup_ratio_warms_up_a_share_of_the_steps_and_wins_over_a_shipped_recipes_steps():
    recipe = parse_args(["--recipe", "bert-base-finetune", "--warmup_ratio", "0.1", "--learning_rate", "1e-3"],
                        command="finetune")
    assert recipe.warmup_steps == 100  # the shipped recipe's, which the user's ratio replaces
    adam, schedule = build_optimizer(torch.nn.Linear(4, 4), recipe, 200, d_model=512)
    rates = []
    for _ in range(25):
        rates.append(adam.param_groups[0]["lr"])
        adam.step()
        schedule.step()
    assert rates[0] == pytest.approx(1e-3 / 20) and rates[19] == pytest.approx(1e-3) and rates[21] < 1e-3


@pytest.mark.parametrize("argv, refusal", [
    (["--warmup_steps", "10", "--warmup_ratio", "0.1"], r"'warmup_steps' \(10\) and 'warmup_ratio' \(0.1\) both set"),
    (["--warmup_ratio", "1"], r"recipe key 'warmup_ratio' must be in \[0, 1\), got 1"),
])
def test_a_warmup_set_twice_or_past_the_run_is_refused(argv, refusal):
    from train.run.recipes import RecipeError

    with pytest.raises(RecipeError, match=refusal):
        parse_args(["--recipe", "bert-base-finetune", *argv], command="finetune")
