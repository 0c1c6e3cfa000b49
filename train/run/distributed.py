"""How a run is spread over processes: the Accelerator that `accelerate launch` asked for, or a clear error.

`build_accelerator` refuses a launch Accelerate would quietly run otherwise (processes that form no group, DeepSpeed
under ACCELERATE_USE_CPU) and runs FSDP and DeepSpeed on gloo CPU processes; `describe` is how the run ran (first log
record, `results.json`); `token_mean` weights a per-token loss so that N processes train as one; `one_process_first`
lets one process (of the run, or of each machine) write what the others read before the Accelerator exists;
`CpuPeers` lets the processes agree on the CPU (a stream read by shard); a process that joined a group lets its
communication threads finish before it exits (`_grace_at_exit`). docs/scaling.md.
"""


from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState, PartialState
from accelerate.utils import (
    DistributedType,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    InitProcessGroupKwargs,
    parse_flag_from_env,
)

import modeling  # noqa: F401  (registers the Lineage families with the Auto classes)
from train.run.environment import installed, name_cpu_for_deepspeed
from train.run.recipes import RecipeError

EXIT_GRACE_SECONDS = 0.2  # how long a process of a group lets its communication threads finish at exit
STALE_BUILD_LOCK_SECONDS = 600  # a lock of torch's JIT build this old is left by a killed build (one takes ~30 s)


class DistributedSetupError(RuntimeError):
    """The launch asked for a distribution this machine cannot give."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "false").lower() in ("true", "1", "yes")


def _deepspeed_on_cpu() -> bool:
    """A launcher started this process for DeepSpeed on a machine without CUDA: DeepSpeed's CPU accelerator runs it on
    gloo, which Accelerate starts only when told the backend (it would otherwise make each process a world of one)."""
    launched = os.environ.get("LOCAL_RANK", "-1") != "-1"
    return launched and requested_type() is DistributedType.DEEPSPEED and not torch.cuda.is_available()


def process_state() -> PartialState:
    """Accelerate's process-wide state as the run's Accelerator will build it: CPU processes where ACCELERATE_USE_CPU
    says so, DeepSpeed's on gloo where there is no GPU. Whichever is built first joins the process group. On a machine
    with no accelerator DeepSpeed is told the CPU it would pick (`name_cpu_for_deepspeed`)."""
    name_cpu_for_deepspeed()
    backend = {"backend": "gloo"} if _deepspeed_on_cpu() else {}
    if backend:
        check_op_build_lock()
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"), **backend)
    _grace_at_exit()
    return state


def _grace_at_exit() -> None:
    """Once this process is in a process group: before the interpreter finalizes, let the group's threads finish.

    A gloo worker thread lets go of a collective's tensors just after the collective has returned, and letting go of a
    tensor that Python also holds takes the GIL. If the main thread reaches the interpreter's finalization first (a
    process that leaves right after its last collective, as every process but the main one does at the end of a run),
    the worker asks for the GIL there, Python ends it with `pthread_exit`, and inside C++ that is `std::terminate`: the
    process dies with SIGABRT, "terminate called without an active exception", after its work was done (torch 2.10 and
    2.13 alike; pytorch/pytorch#190489). `destroy_process_group` does not prevent it while a model still holds the
    group (DDP, FSDP and DeepSpeed all do). Sleeping in an exit handler releases the GIL to such threads while Python
    still runs them; measured with a bare gloo script on 2 processes: 9 of 20 launches died, 0 of 40 with 10 ms."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        _register_grace()


@functools.cache
def _register_grace() -> None:
    atexit.register(time.sleep, EXIT_GRACE_SECONDS)


def check_op_build_lock(op: str = "deepspeed_shm_comm") -> None:
    """Refuse to start DeepSpeed on the CPU while a killed build's lock would stop it forever. DeepSpeed loads its CPU
    communication op `op` through torch's JIT build, which holds a `lock` file in the op's build folder while it checks
    or builds it, and waits for another process's lock with no time limit and no message. A process killed meanwhile
    (the launcher stops the others with SIGTERM when one fails, and on Ctrl-C) leaves the file behind, and every later
    run waited on it silently. A lock older than STALE_BUILD_LOCK_SECONDS is taken for such a one."""
    from torch.utils.cpp_extension import _get_build_directory  # the folder torch's JIT build uses for `op`

    lock = os.path.join(_get_build_directory(op, verbose=False), "lock")
    try:
        age = time.time() - os.stat(lock).st_mtime
    except FileNotFoundError:
        return
    if age > STALE_BUILD_LOCK_SECONDS:
        raise DistributedSetupError(
            f"DeepSpeed's CPU communication op {op} is locked by {lock}, written {age / 60:.0f} minutes ago by a build "
            f"that was killed (a build takes under a minute); torch would wait on it forever. Delete that file if no "
            f"other run is building the op now, then launch again")


def resolve_mixed_precision(value: str) -> str:
    """The recipe's `mixed_precision`; `auto`: bf16 (fp16 where bf16 is unsupported) on a GPU, none on a CPU. fp16
    on a CPU is refused: Accelerate has no fp16 autocast there and would train in fp32 while recording fp16."""
    if value == "fp16" and process_state().device.type == "cpu":
        raise RecipeError("recipe key 'mixed_precision' is fp16, which a CPU does not run (the run would train in "
                          "fp32 and be recorded as fp16): use bf16 (autocast on the CPU), no, or auto")
    if value != "auto":
        return value
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"


def requested_type() -> DistributedType | None:
    """The sharded distribution `accelerate launch` was configured for (None: plain processes)."""
    if _flag("ACCELERATE_USE_DEEPSPEED"):
        return DistributedType.DEEPSPEED
    if _flag("ACCELERATE_USE_FSDP"):
        return DistributedType.FSDP
    return None


def build_accelerator(micro_batch_size: int, gradient_accumulation_steps: int = 1, max_grad_norm: float = 0.0,
                      **kwargs) -> Accelerator:
    """An Accelerator that runs as the launch asked, or a `DistributedSetupError` before anything is built on it.
    `micro_batch_size` (examples per process and step), `gradient_accumulation_steps` and `max_grad_norm` (0: no
    clipping) are the recipe's: they govern whatever the accelerate config says (`follow_recipe`)."""
    asked = requested_type()
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    plugin = FullyShardedDataParallelPlugin() if asked is DistributedType.FSDP else None
    if _deepspeed_on_cpu():
        check_op_build_lock()
        kwargs["kwargs_handlers"] = [*kwargs.get("kwargs_handlers", ()), InitProcessGroupKwargs(backend="gloo")]
    # a plugin, not `gradient_accumulation_steps=`, which the launch's ACCELERATE_GRADIENT_ACCUMULATION_STEPS overrides
    accumulation = GradientAccumulationPlugin(num_steps=gradient_accumulation_steps)
    accelerator = Accelerator(fsdp_plugin=plugin, gradient_accumulation_plugin=accumulation, **kwargs)
    _grace_at_exit()
    if plugin is not None and accelerator.distributed_type is DistributedType.MULTI_CPU:
        _fsdp_on_cpu(accelerator, plugin)
    got = accelerator.distributed_type
    _check_group(launched, accelerator.num_processes, got)
    if asked is not None and got is not asked:
        _refuse_type(asked, got)
    if got is DistributedType.DEEPSPEED:
        changed = follow_recipe(accelerator.state.deepspeed_plugin, micro_batch_size, gradient_accumulation_steps,
                                max_grad_norm)
        if changed:
            said = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed.items())
            accelerator.print(f"deepspeed config: {said} (the recipe's)")
    return accelerator


def follow_recipe(plugin, micro_batch_size: int, gradient_accumulation_steps: int,
                  max_grad_norm: float) -> dict[str, tuple]:
    """Give DeepSpeed the recipe's batch, accumulation and clipping; returns {key: (config's, recipe's)} for the values
    the config set otherwise. `train_micro_batch_size_per_gpu` where the config leaves it "auto" (the shipped ones do):
    Accelerate reads it from a data loader prepared with the model, but the engine prepares its loaders apart (a
    stream has none), and `prepare(model, ...)` alone would refuse (found on an H200 by `lineage gpu-check`).
    `gradient_accumulation_steps` and `gradient_clipping` whatever the config says (`accelerate config` always writes
    them): DeepSpeed accumulates and clips by its own config, and with the config's 1 and 1.0 a recipe's 4 micro-batches
    per step trained as 1, and its clipping norm was ignored, while the run recorded the recipe's."""
    config = plugin.deepspeed_config
    if plugin.is_auto("train_micro_batch_size_per_gpu"):
        config["train_micro_batch_size_per_gpu"] = micro_batch_size
    changed = {}
    for key, value in (("gradient_accumulation_steps", gradient_accumulation_steps),
                       ("gradient_clipping", float(max_grad_norm))):
        if config.get(key, "auto") not in ("auto", value):
            changed[key] = (config[key], value)
        config[key] = value
    return changed


def check_launch() -> None:
    """Refuse, before a run writes anything, processes that `accelerate launch` started but that formed no process
    group (each would claim the output folder and train alone), and DeepSpeed under ACCELERATE_USE_CPU;
    `build_accelerator` refuses the rest."""
    state = process_state()
    _check_group(int(os.environ.get("WORLD_SIZE", "1")), state.num_processes, state.distributed_type)
    if requested_type() is DistributedType.DEEPSPEED and parse_flag_from_env("ACCELERATE_USE_CPU"):
        _refuse_type(DistributedType.DEEPSPEED, state.distributed_type)  # Accelerate drops DeepSpeed under it


def _refuse_type(asked: DistributedType, got: DistributedType) -> None:
    why = ("ACCELERATE_USE_CPU=true makes Accelerate run the processes as DDP; unset it (without a GPU, "
           "DeepSpeed runs its processes on gloo by itself)"
           if asked is DistributedType.DEEPSPEED
           else "FSDP needs several processes in one group (GPUs, or CPU processes with ACCELERATE_USE_CPU=true)")
    raise DistributedSetupError(f"the accelerate config asks for {asked.name}, but this machine would run it as "
                                f"DistributedType.{got.name}: {why}")


def _check_group(launched: int, processes: int, got: DistributedType) -> None:
    if launched > 1 and processes != launched:
        raise DistributedSetupError(
            f"the launcher started {launched} processes, but they formed no process group: each would train alone as "
            f"DistributedType.{got.name}. This machine has no GPU; to run processes on the CPU (gloo), set "
            f"ACCELERATE_USE_CPU=true (for FSDP the config fsdp_cpu: lineage configs accelerate/fsdp_cpu prints its "
            "path), or launch one process")


def _fsdp_on_cpu(accelerator: Accelerator, plugin: FullyShardedDataParallelPlugin) -> None:
    """Run the FSDP plugin on gloo CPU processes, where Accelerate would quietly use DDP instead."""
    if plugin.fsdp_version != 2:
        raise DistributedSetupError("FSDP on CPU processes needs fsdp_version: 2 in the accelerate config "
                                    f"(got {plugin.fsdp_version})")
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)
    for state in (accelerator.state, PartialState()):
        state.distributed_type = DistributedType.FSDP
    accelerator.state.fsdp_plugin = plugin


def mark_sharded_for_generate(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """transformers' `generate` keeps every process stepping until all have finished (`synced_gpus`) only for models
    it knows to be sharded; Accelerate's FSDP2 does not mark them, and processes decoding batches of different
    lengths would then wait on each other's all-gathers forever."""
    if accelerator.distributed_type is DistributedType.FSDP and accelerator.num_processes > 1:
        accelerator.unwrap_model(model)._is_fsdp_managed_module = True


def describe(accelerator: Accelerator) -> dict:
    """How the run runs: distribution, process count, mixed precision and, for FSDP and DeepSpeed, how they shard."""
    kind = accelerator.distributed_type
    record = {"distributed_type": kind.name, "num_processes": accelerator.num_processes,
              "mixed_precision": accelerator.mixed_precision}
    if kind is DistributedType.FSDP:
        plugin = accelerator.state.fsdp_plugin
        record["fsdp_version"] = plugin.fsdp_version
        record["fsdp_sharding_strategy"] = (
            ("FULL_SHARD" if plugin.reshard_after_forward else "SHARD_GRAD_OP") if plugin.fsdp_version == 2
            else plugin.sharding_strategy.name)
        record["fsdp_activation_checkpointing"] = bool(plugin.activation_checkpointing)
    elif kind is DistributedType.DEEPSPEED:
        record["deepspeed_zero_stage"] = accelerator.state.deepspeed_plugin.zero_stage
        record["deepspeed_version"] = installed("deepspeed")  # not among `versions()`: a dependency of this run only
    return record


def enable_gradient_checkpointing(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Recompute each block's activations in the backward (non-reentrant), before the model is wrapped; refused next
    to FSDP's own activation checkpointing."""
    plugin = accelerator.state.fsdp_plugin if accelerator.distributed_type is DistributedType.FSDP else None
    if plugin is not None and plugin.activation_checkpointing:
        raise DistributedSetupError("recipe key 'gradient_checkpointing' and the accelerate config's "
                                    "fsdp_activation_checkpointing both recompute activations; set only one")
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"recipe key 'gradient_checkpointing': {type(model).__name__} does not support it "
                         f"(set it to false)")
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


def token_mean(accelerator: Accelerator, loss: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """`loss`, a mean over this process's `tokens` (a boolean mask of those it counts), re-weighted so that its mean
    over processes (what DDP, FSDP and DeepSpeed average gradients by) is the mean over all processes' tokens of this
    micro-batch. Under accumulation each micro-batch counts equally, as in a one-process run."""
    count = tokens.sum().float()
    total = accelerator.reduce(count.detach().clone(), "mean")
    return loss * count / total.clamp(min=1.0)


class CpuPeers:
    """The run's processes as a gloo group beside the training's own, so that asking them reads nothing back from a
    GPU: whether every process's flag is true (`all`) and every process's value (`gather`, in rank order)."""

    def __init__(self):
        self.group = torch.distributed.new_group(backend="gloo")

    def all(self, flag: bool) -> bool:
        value = torch.tensor([int(flag)])
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MIN, group=self.group)
        return bool(value.item())

    def gather(self, value) -> list:
        values = [None] * torch.distributed.get_world_size(self.group)
        torch.distributed.all_gather_object(values, value, group=self.group)
        return values


def forget_accelerate_state() -> None:
    """Reset Accelerate's process-wide state (not the process group), so the next run builds its Accelerator afresh."""
    AcceleratorState._reset_state()
    GradientState._reset_state()


def report_failure(accelerator: Accelerator, where: str, error: BaseException) -> None:
    """Say which process failed, where (`at step 3`, `in the final evaluation after step 2`) and why, on its own
    stderr (the launcher then stops the others)."""
    print(f"[rank {accelerator.process_index} of {accelerator.num_processes}] training failed {where}: "
          f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)


def unsharded(model: torch.nn.Module, state_dict: dict) -> tuple[torch.nn.Module, dict]:
    """`model` as its own class, with the state dict to save: FSDP2 turns a model's class into `FSDP<Name>`, whose code
    transformers cannot copy into the folder, so such a model is rebuilt unsharded from its gathered `state_dict`;
    DeepSpeed ZeRO-2 gives each entry its own copy, so a tied parameter's names share one tensor again (transformers
    saves a tie once by finding the names that share one)."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        first: dict[int, str] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            tied = first.setdefault(id(param), name)
            if tied != name and tied in state_dict and name in state_dict:
                state_dict[name] = state_dict[tied]
        return model, state_dict
    cls = next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))
    with torch.random.fork_rng(devices=[]):
        plain = cls._from_config(model.config)
    plain.load_state_dict(state_dict)
    if model.can_generate():
        plain.generation_config = model.generation_config
    return plain, plain.state_dict()


@contextmanager
def one_process_first(local: bool = False) -> Iterator[bool]:
    """Run the block in the main process first and then in the others (whether this is the main process is
    yielded), before the Accelerator exists: one process writes what the others then read. `local`: the main process
    of each machine first, for what goes into a machine's own cache (LINEAGE_CACHE)."""
    state = process_state()
    with state.local_main_process_first() if local else state.main_process_first():
        yield state.is_local_main_process if local else state.is_main_process


__all__ = ["CpuPeers", "DistributedSetupError", "build_accelerator", "check_launch", "check_op_build_lock", "describe",
           "enable_gradient_checkpointing", "forget_accelerate_state", "mark_sharded_for_generate", "one_process_first",
           "report_failure", "requested_type", "resolve_mixed_precision", "follow_recipe", "token_mean",
           "unsharded"]
