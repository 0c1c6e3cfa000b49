"""Checkpoint averaging: the mean of the weights of several checkpoints (or model folders) of one run, tensor by
tensor, as fairseq's `average_checkpoints.py`, OpenNMT-py and joeynmt average the last checkpoints of a run.

`check_same_run` refuses inputs (`Member`) of different configs or vocabularies; `average_weights` sums in float64 one
member at a time and casts back; `average_into` averages a run's last N checkpoints into its model. docs/training.md
("Checkpoint averaging"), docs/evaluation.md ("Averaging checkpoints").
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import MODEL_NAME, DistributedType, broadcast_object_list
from safetensors import safe_open
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from train.run.checkpoints import STATE_FILE, CheckpointError, complete_checkpoints, verify_checkpoint


class AveragingError(ValueError):
    """Inputs that cannot be averaged: not one run's checkpoints or model folders of one architecture."""


@dataclass
class Member:
    """One input of an average: its name as given, its safetensors files (or the folder of a DeepSpeed checkpoint's
    partitions), model config fields (without the keys that say how a model is run) and vocabulary ({tokens,
    vocabulary_sha256}; None when unrecorded)."""

    name: str
    files: list[Path]
    config: dict | None
    vocabulary: dict | None


def checkpoint_member(path: Path, name: str) -> Member:
    """A checkpoint folder (`<output_dir>/checkpoints/step-N`) as an input: verified, with its recorded identity."""
    try:
        record = verify_checkpoint(path)
    except CheckpointError as error:
        raise AveragingError(f"{name}: {error}") from None
    weights = next((p for p in (path / "model.safetensors", path / MODEL_NAME) if p.exists()), None)
    if weights is None:
        raise AveragingError(f"{name}: this checkpoint holds neither model.safetensors nor DeepSpeed's partitions "
                             f"({MODEL_NAME}/)")
    run = record.get("run") or {}
    return Member(name, [weights], run.get("model_config"), run.get("tokenizer"))


def is_checkpoint(path: Path) -> bool:
    return (path / STATE_FILE).is_file()


def _first_difference(first: dict, other: dict) -> str | None:
    """The first key whose values differ: `model_type` (another family differs in many keys), then in name order."""
    for key in sorted(set(first) | set(other), key=lambda key: (key != "model_type", key)):
        if first.get(key) != other.get(key):
            return key
    return None


def check_same_run(members: list[Member]) -> None:
    """Refuse members whose model configs or vocabularies differ from the first's, naming the first differing key;
    an unrecorded config or vocabulary (a checkpoint from before records were kept) is not compared."""
    first = members[0]
    for member in members[1:]:
        for part, what in (("config", "model config"), ("vocabulary", "tokenizer")):
            mine, theirs = getattr(first, part), getattr(member, part)
            key = _first_difference(mine, theirs) if mine is not None and theirs is not None else None
            if key is not None:
                raise AveragingError(
                    f"{member.name} is not of the same run as {first.name}: their {what}s differ, first in {key!r} "
                    f"({theirs.get(key)!r} against {mine.get(key)!r}); only checkpoints of one model and vocabulary "
                    "can be averaged")


def _read(member: Member) -> dict[str, torch.Tensor]:
    weights = {}
    for file in member.files:
        if file.is_dir():
            weights.update(_deepspeed_weights(file, member.name))
            continue
        with safe_open(file, "pt") as handle:
            weights.update({key: handle.get_tensor(key) for key in handle.keys()})
    return weights


def _deepspeed_weights(folder: Path, name: str) -> dict[str, torch.Tensor]:
    """The full fp32 weights of a DeepSpeed checkpoint's partitions (`folder`: its `pytorch_model/`), merged by
    DeepSpeed's `zero_to_fp32`; a tied parameter under its first name only, as saved weights have it."""
    try:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    except ImportError:
        raise AveragingError(f"{name}: a DeepSpeed checkpoint is read with deepspeed: pip install deepspeed") from None
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its progress bars
        merged = get_fp32_state_dict_from_zero_checkpoint(str(folder.parent), tag=folder.name)
    weights, seen = {}, set()
    for key, tensor in merged.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            weights[key] = tensor
    return weights


def _check_tensors(first: Member, reference: dict, member: Member, weights: dict) -> None:
    missing, extra = sorted(set(reference) - set(weights)), sorted(set(weights) - set(reference))
    if missing or extra:
        which = f"lacks {missing[0]!r}" if missing else f"has {extra[0]!r}, which {first.name} lacks"
        raise AveragingError(f"{member.name} {which}: only weights of one architecture can be averaged")
    for key, tensor in weights.items():
        if tensor.shape != reference[key].shape:
            raise AveragingError(f"{member.name}: {key!r} has shape {tuple(tensor.shape)}, {first.name} "
                                 f"{tuple(reference[key].shape)}")


def average_weights(members: list[Member]) -> dict[str, torch.Tensor]:
    """The mean of the members' tensors, each in its own dtype (summed in float64); tensors that are not floating
    point (counters, ids) must be equal in every member and are kept."""
    total, dtypes, first = {}, {}, None
    for member in members:
        weights = _read(member)
        if first is None:
            first, dtypes = weights, {k: v.dtype for k, v in weights.items()}
            total = {k: v.double() if v.is_floating_point() else v for k, v in weights.items()}
            continue
        _check_tensors(members[0], first, member, weights)
        for key, tensor in weights.items():
            if tensor.is_floating_point():
                total[key] += tensor.double()
            elif not torch.equal(tensor, total[key]):
                raise AveragingError(f"{member.name}: {key!r} ({tensor.dtype}, not averaged) differs from "
                                     f"{members[0].name}'s")
    return {k: (v / len(members)).to(dtypes[k]) if v.is_floating_point() else v for k, v in total.items()}


def load_averaged(model: torch.nn.Module, weights: dict[str, torch.Tensor], name: str) -> None:
    """Put averaged `weights` into `model` (a plain module); the names a tied parameter has besides its first may
    be absent, as they are in saved weights."""
    aliases = ({n for n, _ in model.named_parameters(remove_duplicate=False)}
               - {n for n, _ in model.named_parameters()})
    result = model.load_state_dict(weights, strict=False)
    missing = sorted(set(result.missing_keys) - aliases)
    if missing or result.unexpected_keys:
        raise AveragingError(f"{name}: the averaged weights do not fit {type(model).__name__} (missing "
                             f"{missing[:3]}, unexpected {sorted(result.unexpected_keys)[:3]})")


def average_into(accelerator: Accelerator, model: torch.nn.Module, root: Path, count: int) -> list[str]:
    """Replace the weights of a run's prepared `model` (every process) with the mean of its last `count` complete
    checkpoints under `root`, read and averaged by the main process and broadcast; returns their names."""
    weights, outcome = {}, [None]
    if accelerator.is_main_process:
        try:
            paths = complete_checkpoints(root)[-count:]
            members = [checkpoint_member(path, str(path)) for path in paths]
            check_same_run(members)
            weights, outcome = average_weights(members), [[path.name for path in paths]]
        except Exception as error:  # the others raise it too, rather than wait for weights that will not come
            outcome = [error]
    if accelerator.num_processes > 1:
        outcome = broadcast_object_list(outcome)
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    unwrapped = accelerator.unwrap_model(model)
    first = {id(p): n for n, p in unwrapped.named_parameters()}
    for name, param in unwrapped.named_parameters(remove_duplicate=False):  # tied names, left out when saved
        if name not in weights and first[id(param)] in weights:
            weights[name] = weights[first[id(param)]]
    broadcast = accelerator.num_processes > 1
    if accelerator.distributed_type is DistributedType.DEEPSPEED:
        _set_deepspeed(unwrapped, weights, accelerator.is_main_process, broadcast)
    else:  # DDP, FSDP2 (each process's shard sliced from the broadcast tensor) and FSDP1 (full tensors) alike
        set_model_state_dict(model, weights,
                             options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=broadcast))
    accelerator.print(f"average_last_checkpoints: the model is the mean of {', '.join(outcome[0])}")
    return outcome[0]


def _set_deepspeed(model: torch.nn.Module, weights: dict[str, torch.Tensor], main: bool, broadcast: bool) -> None:
    """Put the main process's `weights` into a DeepSpeed engine's module on every process: a ZeRO-3 parameter
    gathered, set on the main process and partitioned again from it; a whole one (ZeRO-1/2) set and broadcast. The
    optimizer's fp32 copies keep the trained values: averaging comes after the last step."""
    import deepspeed

    for name, param in model.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
            if main:
                param.data.copy_(weights[name])
        if broadcast and not hasattr(param, "ds_id"):
            torch.distributed.broadcast(param.data, src=0)


__all__ = ["AveragingError", "Member", "average_into", "average_weights", "check_same_run", "checkpoint_member",
           "is_checkpoint", "load_averaged"]
