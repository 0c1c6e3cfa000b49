"""A run's log: every step record and evaluation, in memory (`history`), in `<output_dir>/logs/metrics.jsonl` (main
process) and in the Accelerate trackers of `report_to`. `RunLog` writes nothing before `start` (the engine opens it
when training begins); a resumed run keeps the records up to its checkpoint's step. `check_tracker_login` refuses,
before training, a hosted tracker with no account to log to. docs/training.md ("Logging").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from accelerate import Accelerator

from train.run import strict_json
from train.run.recipes import RecipeError

PROJECT = "lineage"  # the trackers' project (TensorBoard: the folder under logs/)


class RunLog:
    def __init__(self, accelerator: Accelerator, output_dir: Path, tracked: bool, recipe_fields: dict):
        """`tracked`: the accelerator was built with trackers (`log_with`), which get the config and the figures.
        Nothing is written before `start`."""
        self.accelerator, self.tracked, self.recipe_fields = accelerator, tracked, recipe_fields
        self.output_dir, self.file = output_dir, output_dir / "logs" / "metrics.jsonl"
        self.history: list[dict] = []

    def start(self, step: int = 0) -> None:
        """Open the trackers and the log, keeping the records up to `step` (a resumed run's checkpoint; 0: none)."""
        if self.tracked:
            run = self.output_dir.resolve().name
            self.accelerator.init_trackers(PROJECT, config=_scalars(self.recipe_fields),
                                           init_kwargs={"wandb": {"name": run}, "mlflow": {"run_name": run}})
        self.restart(step)

    def restart(self, step: int = 0) -> None:
        """Keep the records up to `step` (0: a new run keeps none), in memory and on disk."""
        self.history = [r for r in read_jsonl(self.file) if r.get("step", 0) <= step] if step else []
        if self.accelerator.is_main_process:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self.file.write_text("".join(strict_json.dumps(r) + "\n" for r in self.history))

    def record_launch(self, step: int, launch: dict, changed: dict | None = None) -> None:
        """How this (re)start of the run is distributed (`train.run.distributed.describe`): its first line; with the
        recipe keys a resume changed ({key: [before, now]})."""
        record = {"step": step, "seconds": 0.0, "launch": launch, **({"changed": changed} if changed else {})}
        self.history.append(record)
        if self.accelerator.is_main_process:
            with self.file.open("a") as f:
                f.write(strict_json.dumps(record) + "\n")

    def record(self, record: dict) -> None:
        self.history.append(record)
        if self.accelerator.is_main_process:
            with self.file.open("a") as f:
                f.write(strict_json.dumps(record) + "\n")
        if self.tracked:
            scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
            self.accelerator.log(scalars, step=record["step"])

    def values(self, key: str) -> list:
        """Every logged value of `key`, in order."""
        return [r[key] for r in self.history if key in r]


# hosted trackers: (the environment variables that hold a key, the netrc machine of a stored login, the variable and
# values that log offline)
HOSTED = {"wandb": (("WANDB_API_KEY",), "api.wandb.ai", ("WANDB_MODE", ("offline", "disabled", "dryrun"))),
          "comet_ml": (("COMET_API_KEY",), None, ("COMET_MODE", ("offline", "disabled")))}


def check_tracker_login(names: list[str]) -> None:
    """Refuse a hosted tracker of `names` (`recipes.trackers`) with no key, no stored login and no offline mode."""
    import netrc

    for name in names:
        if name not in HOSTED:
            continue
        keys, machine, (mode, offline) = HOSTED[name]
        if any(os.environ.get(k) for k in keys) or os.environ.get(mode, "").lower() in offline:
            continue
        try:
            stored = machine is not None and netrc.netrc().authenticators(machine) is not None
        except (OSError, netrc.NetrcParseError):
            stored = False
        if not stored:
            raise RecipeError(f"recipe key 'report_to' names {name}, which has no login here (no {', '.join(keys)}"
                              f"{f', no {machine} entry in ~/.netrc' if machine else ''}): set the key, log in, set "
                              f"{mode}=offline to log locally, or leave {name} out of report_to")


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _scalars(fields: dict) -> dict:
    return {k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in fields.items()}


__all__ = ["HOSTED", "RunLog", "check_tracker_login", "read_jsonl"]
