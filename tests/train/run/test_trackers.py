"""`report_to`: the experiment trackers Accelerate supports, one or several, `all` or `none`; a tracker whose
package is missing is refused before anything is trained, naming the package; the recipe and every numeric figure
of `logs/metrics.jsonl` reach the trackers (TensorBoard here; MLflow's local file store where mlflow is installed)."""

import json
from pathlib import Path

import accelerate.tracking
import pytest
import yaml

from train import pretrain_gpt
from train.run.recipes import RecipeError, load_recipe, trackers

ACCELERATE_TRACKERS = ("tensorboard", "wandb", "mlflow", "comet_ml", "aim", "clearml", "dvclive")


def _tiny_run(out: Path, report_to: str) -> Path:
    pretrain_gpt.main(["--recipe", "gpt-pretrain-tiny", "--output_dir", str(out), "--report_to", report_to,
                       "--max_steps", "4", "--logging_steps", "1", "--eval_steps", "2", "--train_size", "32",
                       "--eval_size", "8", "--progress_bar", "false"])
    return out


def _figures(out: Path) -> dict[str, dict[int, float]]:
    """key -> step -> value of every numeric figure in logs/metrics.jsonl (the launch record describes the run)."""
    figures: dict[str, dict[int, float]] = {}
    for line in (out / "logs" / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "launch" in record:
            continue
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                figures.setdefault(key, {})[record["step"]] = value
    return figures


def test_report_to_takes_a_name_several_all_or_none():
    assert trackers("none") == [] and trackers([]) == []
    assert trackers("tensorboard") == ["tensorboard"] == trackers(["tensorboard"])
    assert trackers("tensorboard, tensorboard") == ["tensorboard"]
    assert trackers("all") == [str(t) for t in accelerate.tracking.get_available_trackers()]
    assert "tensorboard" in trackers("all")  # a dependency of lineage
    assert load_recipe(None, {"report_to": ["tensorboard"]}).report_to == ["tensorboard"]


@pytest.mark.parametrize("name", ACCELERATE_TRACKERS)
def test_every_accelerate_tracker_is_accepted_or_refused_for_its_missing_package_only(name):
    installed = [str(t) for t in accelerate.tracking.get_available_trackers()]
    if name in installed:
        assert trackers(f"tensorboard,{name}") == list(dict.fromkeys(["tensorboard", name]))
    else:
        with pytest.raises(RecipeError, match=f"tracker '{name}' needs the package {name}, which is not installed: "
                                              f"pip install {name}"):
            trackers(f"tensorboard,{name}")


@pytest.mark.parametrize("bad", ["tensorbord", "all,wandb", ["tensorboard", "none"], "tensorboard,,wandb"])
def test_unknown_trackers_are_refused_listing_accelerates(bad):
    with pytest.raises(RecipeError, match="'report_to' must be none, all, or one or several .* of aim, comet_ml, "
                                          "mlflow, tensorboard, wandb, clearml, dvclive"):
        trackers(bad)


def test_a_tracker_without_its_package_stops_the_script_before_it_writes_anything(tmp_path, monkeypatch):
    installed = [t for t in accelerate.tracking.get_available_trackers() if str(t) != "mlflow"]
    monkeypatch.setattr(accelerate.tracking, "get_available_trackers", lambda: installed)  # as if mlflow were missing
    with pytest.raises(RecipeError, match="tracker 'mlflow' needs the package mlflow, .*pip install mlflow"):
        _tiny_run(tmp_path / "run", "tensorboard,mlflow")
    assert not (tmp_path / "run").exists()


def test_tensorboard_gets_the_recipe_and_every_figure_of_the_log(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = _tiny_run(tmp_path / "run", "tensorboard")
    run = out / "logs" / "lineage"
    (hparams,) = run.glob("*/hparams.yml")  # Accelerate's copy of the config beside the hparams event file
    config = yaml.safe_load(hparams.read_text())
    assert config["learning_rate"] == load_recipe("gpt-pretrain-tiny").learning_rate and config["max_steps"] == 4
    events = EventAccumulator(str(run), size_guidance={"scalars": 0}).Reload()
    figures = _figures(out)
    assert {"loss", "lr", "eval_loss", "eval_perplexity"} <= set(figures) == set(events.Tags()["scalars"])
    for key, values in figures.items():
        logged = {e.step: e.value for e in events.Scalars(key)}
        assert logged == pytest.approx(values, rel=1e-6), key


def test_mlflow_gets_the_recipe_and_every_figure_of_the_log(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())  # the local file store
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = _tiny_run(tmp_path / "gpt-run", "tensorboard,mlflow")
    client = mlflow.MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("lineage").experiment_id])
    assert run.info.run_name == "gpt-run" and run.data.params["max_steps"] == "4"
    for key, values in _figures(out).items():
        logged = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert logged == pytest.approx(values, rel=1e-6), key
