"""FSDP (v2) on two CPU processes (gloo) through `accelerate launch` with the config `fsdp_cpu`,
checkpoints across world sizes, and the DeepSpeed configs.

For each family with tied embeddings (GPT's LM head, BERT's MLM head, the Transformer's one embedding for source,
target and output): the parameters are really sharded (every one a DTensor holding half of its rows), the tie is
still one parameter with one storage that the optimizer updates once, the per-step losses equal a one-process run
with the same global batch (dropout off, abs 1e-5: the processes sum the same terms in another order), and the
final folder is an ordinary `save_pretrained` folder. A two-process checkpoint (DDP, FSDP) resumes in one process
and a one-process checkpoint in two, continuing the same loss curve (same tolerance).
"""

import importlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_distributed import NO_DROPOUT, REPO, _losses, launch_two_processes

from train.run import distributed

TOL = 1e-5
FSDP_CPU = "train/configs/accelerate/fsdp_cpu.yaml"
FAMILIES = {  # entry script, recipe, Auto class of the final folder
    "gpt": ("train.pretrain_gpt", "gpt-pretrain-tiny", "AutoModelForCausalLM"),
    "bert": ("train.pretrain_bert", "bert-pretrain-tiny", "AutoModelForPreTraining"),
    "transformer": ("train.train_translation", "transformer-translation-tiny",
                    "AutoModelForSeq2SeqLM"),
}


def _args(family: str, out: Path, per_device: int, *extra: str) -> list[str]:
    return ["--recipe", FAMILIES[family][1], "--model_overrides", NO_DROPOUT, "--max_steps", "4", "--save_steps", "2",
            "--progress_bar", "false", "--report_to", "none", "--train_size", "64", "--eval_size", "8",
            "--logging_steps", "1", "--per_device_train_batch_size", str(per_device), "--output_dir", str(out), *extra]


def one_process(family: str, out: Path, *extra: str, per_device: int = 8) -> Path:
    importlib.import_module(FAMILIES[family][0]).main(_args(family, out, per_device, *extra))
    return out


def two_processes(family: str, out: Path, *extra: str, config: str | None = FSDP_CPU) -> Path:
    launch_two_processes(*_args(family, out, 4, *extra), module=FAMILIES[family][0], config=config, driver=True)
    return out


def resumed_from(checkpoint: Path, out: Path) -> Path:
    """A fresh output folder holding only `checkpoint`, to resume from with `--resume_from_checkpoint latest`."""
    shutil.copytree(checkpoint, out / "checkpoints" / checkpoint.name)
    return out


def assert_same_losses(run: Path, reference: Path, steps: list[int]) -> None:
    got, want = _losses(run), _losses(reference)
    assert sorted(got) == steps, sorted(got)
    for step in steps:
        assert got[step] == pytest.approx(want[step], abs=TOL), step


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs made once per module, on first use: `runs("gpt", "one")`, `runs("gpt", "fsdp")`."""
    made: dict[tuple, Path] = {}

    def get(family: str, kind: str) -> Path:
        if (family, kind) not in made:
            out = tmp_path_factory.mktemp(f"{family}-{kind}")
            made[family, kind] = one_process(family, out) if kind == "one" else two_processes(family, out)
        return made[family, kind]
    return get


def check_fsdp_run(family: str, fsdp: Path, one: Path) -> None:
    launch = json.loads((fsdp / "logs" / "metrics.jsonl").read_text().splitlines()[0])["launch"]
    assert launch == {"distributed_type": "FSDP", "num_processes": 2, "mixed_precision": "no", "fsdp_version": 2,
                      "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_activation_checkpointing": False}
    results = json.loads((fsdp / "model" / "results.json").read_text())
    assert {k: results[k] for k in launch} == launch
    prepared = [json.loads((fsdp / f"prepared-rank{r}.json").read_text()) for r in (0, 1)]
    for rank, record in enumerate(prepared):
        assert record["plain"] == [] and record["sharded"]  # every parameter is a DTensor
        for name, (local, full) in record["sharded"].items():
            rows = -(-full[0] // 2)  # dim 0 split in two, the last shard possibly shorter
            assert local == [min(rows, full[0] - rank * rows), *full[1:]], name
        assert record["tied"] and record["one_storage"]  # the head is the embedding, sharded once
        assert record["optimizer_tensors"] == record["distinct_optimizer_tensors"]  # the tie is updated once
    assert_same_losses(fsdp, one, [1, 2, 3, 4])
    check_final_folder(family, fsdp / "model", one / "model")


def check_final_folder(family: str, folder: Path, reference: Path) -> None:
    """Gathered on the main process into an ordinary folder: safetensors, the family's code, its own class names;
    it loads with `from_pretrained` and computes what the one-process run's folder computes. (Outputs, not every
    weight: a key bias of attention gets an exactly-zero gradient in theory, so Adam turns its rounding noise, which
    differs between the runs, into updates that change no output.)"""
    import transformers
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    assert not any("FSDP" in name for name in [*config["architectures"], *config["auto_map"].values()])
    assert (folder / f"modeling_lineage_{family}.py").is_file() and not list(folder.glob("*.bin"))
    assert sorted(load_file(folder / "model.safetensors")) == sorted(load_file(reference / "model.safetensors"))
    auto = getattr(transformers, FAMILIES[family][2])
    model, want = (auto.from_pretrained(f, trust_remote_code=True).eval() for f in (folder, reference))
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    ids = torch.arange(5, 21).reshape(2, 8)
    with torch.no_grad():
        got, expected = model(input_ids=ids, labels=ids), want(input_ids=ids, labels=ids)
    torch.testing.assert_close(got[0], expected[0], atol=TOL, rtol=0)  # the loss
    torch.testing.assert_close(got[1], expected[1], atol=1e-4, rtol=0)  # the logits


def test_fsdp_gpt_shards_keeps_the_tie_and_matches_one_process(runs):
    check_fsdp_run("gpt", runs("gpt", "fsdp"), runs("gpt", "one"))


def test_resuming_with_another_global_micro_batch_is_refused(runs, tmp_path):
    from train.run.checkpoints import CheckpointError

    out = resumed_from(runs("gpt", "one") / "checkpoints" / "step-00000002", tmp_path / "run")
    with pytest.raises(CheckpointError, match="micro-batches of 8 examples over all processes, this run has 4"):
        one_process("gpt", out, "--resume_from_checkpoint", "latest", per_device=4)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "transformer"])
def test_fsdp_shards_keeps_the_tie_and_matches_one_process(runs, family):
    check_fsdp_run(family, runs(family, "fsdp"), runs(family, "one"))


@pytest.mark.slow
def test_fsdp_checkpoint_resumes_in_one_process(runs, tmp_path):
    out = resumed_from(runs("gpt", "fsdp") / "checkpoints" / "step-00000002", tmp_path / "run")
    one_process("gpt", out, "--resume_from_checkpoint", "latest")
    assert_same_losses(out, runs("gpt", "one"), [3, 4])  # the new folder logs from its checkpoint on


@pytest.mark.slow
def test_one_process_checkpoint_resumes_in_two_fsdp_processes(runs, tmp_path):
    out = resumed_from(runs("gpt", "one") / "checkpoints" / "step-00000002", tmp_path / "run")
    two_processes("gpt", out, "--resume_from_checkpoint", "latest")
    assert_same_losses(out, runs("gpt", "one"), [3, 4])
    check_final_folder("gpt", out / "model", runs("gpt", "one") / "model")


@pytest.mark.slow
def test_ddp_with_gradient_checkpointing_matches_and_resumes_in_one_process(runs, tmp_path):
    """Two DDP processes recomputing activations give the losses of one process that keeps them; their checkpoint
    resumes in one process on the same curve."""
    ddp = two_processes("bert", tmp_path / "ddp", "--gradient_checkpointing", "true", config=None)
    launch = json.loads((ddp / "logs" / "metrics.jsonl").read_text().splitlines()[0])["launch"]
    assert launch == {"distributed_type": "MULTI_CPU", "num_processes": 2, "mixed_precision": "no"}
    assert_same_losses(ddp, runs("bert", "one"), [1, 2, 3, 4])
    out = resumed_from(ddp / "checkpoints" / "step-00000002", tmp_path / "resumed")
    one_process("bert", out, "--resume_from_checkpoint", "latest")
    assert_same_losses(out, runs("bert", "one"), [3, 4])


@pytest.mark.slow
def test_fsdp_with_gradient_checkpointing_matches_one_process_without(runs, tmp_path):
    fsdp = two_processes("transformer", tmp_path / "fsdp", "--gradient_checkpointing", "true")
    assert_same_losses(fsdp, runs("transformer", "one"), [1, 2, 3, 4])


def deepspeed_plugin(name: str, monkeypatch):
    """What `accelerate launch` does with the shipped config `name` up to starting the processes (parse, turn into
    their environment), then the plugin each process builds from it."""
    from accelerate.commands.launch import (
        _validate_launch_command,
        launch_command_parser,
    )
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(REPO / "train" / "configs" / "accelerate" / name), "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    known = {action.dest for action in parser._actions}
    assert set(defaults.deepspeed_config) <= known, set(defaults.deepspeed_config) - known  # no ignored key
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
    _, env = prepare_deepspeed_cmd_env(args)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    return DeepSpeedPlugin()


@pytest.mark.parametrize("name, stage", [("deepspeed_zero2.yaml", 2), ("deepspeed_zero3.yaml", 3)])
def test_deepspeed_configs_are_read_by_accelerate_and_build_the_plugin(name, stage, monkeypatch):
    """The plugin each process builds from a shipped config. Not checked here: DeepSpeed's own validation of the
    resulting config (`deepspeed.initialize`): test_distributed_deepspeed.py on CPU processes, and on GPUs
    test_deepspeed_trains_and_saves_an_ordinary_folder."""
    plugin = deepspeed_plugin(name, monkeypatch)
    zero = plugin.deepspeed_config["zero_optimization"]
    assert plugin.zero_stage == zero["stage"] == stage
    assert zero["offload_optimizer"]["device"] == zero["offload_param"]["device"] == "none"
    assert plugin.hf_ds_config.is_zero3() == (stage == 3)
    assert zero["stage3_gather_16bit_weights_on_model_save"] == (stage == 3)  # ZeRO-3 saves a normal folder


@pytest.mark.parametrize("name", ["deepspeed_zero2.yaml", "deepspeed_zero3.yaml"])
def test_deepspeed_follows_the_recipe_batch_accumulation_and_clipping(name, monkeypatch):
    """The shipped configs leave `train_micro_batch_size_per_gpu` to Accelerate, which reads it from a data loader
    prepared with the model; the engine prepares its loaders apart (a stream has none), so `prepare(model, ...)` alone
    refused on the GPU until `build_accelerator` told the plugin the recipe's batch (a value the config sets stays).
    Accumulation and clipping are the recipe's whatever the config says, and a value changed is reported."""
    plugin = deepspeed_plugin(name, monkeypatch)
    assert plugin.is_auto("train_micro_batch_size_per_gpu")  # what made Accelerate refuse
    assert (plugin.get_value("gradient_accumulation_steps"), plugin.get_value("gradient_clipping")) == (1, 1.0)
    assert distributed.follow_recipe(plugin, 4, 1, 1.0) == {}  # the recipe's defaults: nothing to report
    assert plugin.get_value("train_micro_batch_size_per_gpu") == 4
    assert distributed.follow_recipe(plugin, 8, 4, 0) == {"gradient_accumulation_steps": (1, 4),
                                                          "gradient_clipping": (1.0, 0.0)}
    assert plugin.get_value("train_micro_batch_size_per_gpu") == 4
    assert (plugin.get_value("gradient_accumulation_steps"), plugin.get_value("gradient_clipping")) == (4, 0.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["fsdp.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml"])
def test_one_gpu_through_each_sharding_config_gives_the_plain_first_loss(name, tmp_path):
    """One process on one GPU through a shipped sharding config (FSDP2, ZeRO-2, ZeRO-3) starts where a plain bf16 run
    starts: the same first-step loss within bf16's tolerance (DeepSpeed runs the weights in bf16 where plain runs
    autocast over fp32 weights), and the run records the distribution it ran under."""
    plain = one_process("gpt", tmp_path / "plain", "--mixed_precision", "bf16", per_device=4)
    out = tmp_path / "sharded"
    launch_two_processes(*_args("gpt", out, 4, "--mixed_precision", "bf16"), module="train.pretrain_gpt",
                         config=f"train/configs/accelerate/{name}", cpu=False, processes=1)
    launch = json.loads((out / "logs" / "metrics.jsonl").read_text().splitlines()[0])["launch"]
    assert launch["distributed_type"] == ("FSDP" if name.startswith("fsdp") else "DEEPSPEED")
    assert _losses(out)[1] == pytest.approx(_losses(plain)[1], rel=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("name", ["deepspeed_zero2.yaml", "deepspeed_zero3.yaml"])
def test_deepspeed_trains_and_saves_an_ordinary_folder(name, tmp_path):
    """On two GPUs with deepspeed installed: the run trains, records DeepSpeed and its ZeRO stage, and its final
    folder (ZeRO-3: 16-bit weights gathered on the main process) loads with from_pretrained."""
    out = tmp_path / "run"
    launch_two_processes(*_args("gpt", out, 4), module="train.pretrain_gpt", config=f"train/configs/accelerate/{name}",
                         cpu=False)
    launch = json.loads((out / "logs" / "metrics.jsonl").read_text().splitlines()[0])["launch"]
    assert launch["distributed_type"] == "DEEPSPEED" and launch["deepspeed_zero_stage"] == int(name[-6])
    assert sorted(_losses(out)) == [1, 2, 3, 4]
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(out / "model", trust_remote_code=True)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
