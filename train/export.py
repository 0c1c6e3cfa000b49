"""Export a saved Lineage model's inference forward with `torch.export`, as ExportedPrograms or as ONNX.

    python -m train.export --model outputs/bert-finetune-nli-tiny/model --output_dir exported/ [--format torch|onnx]
    python -m train.export --model openai-community/gpt2 --output_dir exported/gpt2   # converted to Lineage on load

`--model` is a Lineage folder or Hub id, or a supported transformers checkpoint (`train.setup.models`). Batch and
lengths are dynamic (GPT's cached step takes one new token); `--format torch` writes `<program>.pt2`
(`torch.export.save`), `--format onnx` `<program>.onnx` (the dynamo exporter), and `export.json` lists each program's
inputs and outputs. Linear layers run on `F.linear` (oneDNN's CPU kernel is not an ONNX operator). The programs of each
family: docs/using.md, "Export (torch.export, ONNX)".
"""

from __future__ import annotations

import argparse
import importlib.util
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from torch.export import Dim
from transformers import DynamicCache

from modeling.arguments import CACHE_NAME, cache_keyword, output_cache
from modeling.linear import LineageLinear
from train.cli import CommandParser, run_script
from train.run import strict_json
from train.run.run_folder import check_writer_output, staged_output
from train.setup import models

FORMATS = ("torch", "onnx")
EXPORTED_TYPES = ("lineage-bert", "lineage-gpt", "lineage-transformer")  # the RNN family is not exported
OLD_FLAGS = {"--out": "--output_dir", "--revision": "--model_revision"}  # old spelling -> the flag now
_OUTPUT_SKIP = ("loss", "hidden_states", "attentions", CACHE_NAME)


class HeadForward(nn.Module):
    """An encoder-style head (BERT, GPT classifiers): token inputs -> the head's output tensors, in `outputs` order."""

    def __init__(self, model: nn.Module, input_names: list[str], outputs: list[str]):
        super().__init__()
        self.model, self.input_names, self.outputs = model, input_names, outputs

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = self.model(**dict(zip(self.input_names, inputs)))
        return tuple(result[name] for name in self.outputs)


class CausalDecoder(nn.Module):
    """GPT causal LM without a cache: (B, T) ids and mask -> (B, T, V) logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _stacked(cache) -> tuple[torch.Tensor, torch.Tensor]:
    """A `DynamicCache`'s keys and values as two tensors, (L, B, H, S, D) each."""
    return torch.stack([layer.keys for layer in cache.layers]), torch.stack([layer.values for layer in cache.layers])


class CausalPrefill(nn.Module):
    """GPT causal LM over a prompt, the start of a cached generation: (B, T) ids and mask -> logits (B, T, V) and the
    keys and values of the T tokens (L, B, H, T, D), which `CachedCausalDecoder` continues."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True)
        return out.logits, *_stacked(output_cache(out))


class CachedCausalDecoder(nn.Module):
    """GPT causal LM, one decoding step over its key/value cache as tensors: past keys and values (L, B, H, P, D), the
    new token's ids (B, 1) and a mask over the P + 1 tokens -> logits (B, 1, V) and the present keys and values
    (L, B, H, P + 1, D). Traced at one token, as the attention kernels branch on a single query (a program for any
    number of new tokens is traced for 2 or more, and its guards refused a past of 0 and past + new below 4)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_keys: torch.Tensor,
                past_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cache = DynamicCache(config=self.model.config)
        for layer, (keys, values) in enumerate(zip(past_keys.unbind(0), past_values.unbind(0))):
            cache.update(keys, values, layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **cache_keyword(cache))
        return out.logits, *_stacked(output_cache(out))


class Seq2SeqEncoder(nn.Module):
    """Transformer encoder: (B, S) source ids and mask -> (B, S, C) memory."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class Seq2SeqDecoder(nn.Module):
    """Transformer decoder step: (B, T) target prefix, (B, S, C) memory, (B, S) source mask -> (B, T, V) logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(decoder_input_ids=decoder_input_ids, encoder_outputs=(encoder_hidden_states,),
                          attention_mask=attention_mask, use_cache=False).logits


# ----------------------------------------------------------------------------------------------------------
# What to export: (name, module, example inputs, input names, output names, dynamic dimensions per input)
# ----------------------------------------------------------------------------------------------------------


def _token_inputs(config, shape: tuple[int, ...], with_types: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(min(5, config.vocab_size - 1), config.vocab_size, shape, generator=generator)
    mask = torch.ones_like(ids)
    mask[..., -1][0] = 0  # one padded position
    inputs = {"input_ids": ids, "attention_mask": mask}
    if with_types:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs


def _head_program(model) -> list[tuple]:
    shape = (2, 3, 6) if type(model).__name__.endswith("ForMultipleChoice") else (2, 6)
    inputs = _token_inputs(model.config, shape, model.config.model_type == "lineage-bert")
    with torch.no_grad():
        result = model(**inputs)
    outputs = [k for k, v in result.items() if k not in _OUTPUT_SKIP and isinstance(v, torch.Tensor)]
    dims = {axis: Dim.AUTO for axis in range(len(shape))}
    return [("model", HeadForward(model, list(inputs), outputs), tuple(inputs.values()), list(inputs), outputs,
             (tuple(dims for _ in inputs),))]  # one entry: the *inputs tuple


def _causal_programs(model) -> list[tuple]:
    """`decoder` (no cache), and a cached generation's `prefill` and one-token step (`decoder_with_cache`). Their
    lengths are named dimensions of at least 1 (the step's mask `past + 1`): under `Dim.AUTO` `torch.export` assumes
    2 or more, and the step's guards refused a past of 1."""
    config = model.config
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    batch, tokens, past = Dim("batch", min=1), Dim("tokens", min=1), Dim("past", min=1)
    prompt, new, past_length = _token_inputs(config, (2, 3), False), _token_inputs(config, (2, 1), False), 4
    keys = torch.randn(config.num_hidden_layers, 2, heads, past_length, head_dim)
    cached_mask = torch.ones(2, past_length + 1, dtype=torch.long)
    cached_mask[0, 0] = 0  # a left-padded row
    prompt_dims, cache_dims = {0: batch, 1: tokens}, {1: batch, 3: past}
    cached = ["logits", "present_keys", "present_values"]
    return [
        ("decoder", CausalDecoder(model), (prompt["input_ids"], prompt["attention_mask"]),
         ["input_ids", "attention_mask"], ["logits"], (prompt_dims, prompt_dims)),
        ("prefill", CausalPrefill(model), (prompt["input_ids"], prompt["attention_mask"]),
         ["input_ids", "attention_mask"], cached, (prompt_dims, prompt_dims)),
        ("decoder_with_cache", CachedCausalDecoder(model),
         (new["input_ids"], cached_mask, keys, torch.randn_like(keys)),
         ["input_ids", "attention_mask", "past_keys", "past_values"], cached,
         ({0: batch}, {0: batch, 1: past + 1}, cache_dims, cache_dims)),
    ]


def _seq2seq_programs(model) -> list[tuple]:
    config = model.config
    source, target = _token_inputs(config, (2, 7), False), _token_inputs(config, (2, 4), False)
    memory = torch.randn(2, 7, config.hidden_size)
    tokens, states = {0: Dim.AUTO, 1: Dim.AUTO}, {0: Dim.AUTO, 1: Dim.AUTO}
    return [
        ("encoder", Seq2SeqEncoder(model), (source["input_ids"], source["attention_mask"]),
         ["input_ids", "attention_mask"], ["encoder_hidden_states"], (tokens, tokens)),
        ("decoder", Seq2SeqDecoder(model), (target["input_ids"], memory, source["attention_mask"]),
         ["decoder_input_ids", "encoder_hidden_states", "attention_mask"], ["logits"], (tokens, states, tokens)),
    ]


def programs(model) -> list[tuple]:
    """The programs to export for `model` (module docstring), each as (name, module, example inputs, input
    names, output names, dynamic shapes)."""
    model_type, name = model.config.model_type, type(model).__name__
    if model_type == "lineage-transformer" and name.endswith("ForConditionalGeneration"):
        return _seq2seq_programs(model)
    if model_type == "lineage-gpt" and name.endswith("ForCausalLM"):
        return _causal_programs(model)
    if model_type in ("lineage-bert", "lineage-gpt"):
        return _head_program(model)
    raise ValueError(f"export supports BERT and GPT models and the Transformer's ForConditionalGeneration, got "
                     f"{name} ({model_type})")


# ----------------------------------------------------------------------------------------------------------
# Loading, exporting, the command
# ----------------------------------------------------------------------------------------------------------


def load_lineage_model(name: str, revision: str | None = None):
    """The model that `--model` names (`train.setup.models`: a Lineage folder or Hub id, or a transformers reference
    checkpoint converted and checked on load), in eval mode; a preset (no trained weights) is refused."""
    source = models.resolve_model(str(name), revision, revision_argument="--model_revision")
    if not source.pretrained:
        raise models.ModelSourceError(f"--model {name!r} is a preset, which has no trained weights to export; give a "
                                       "saved model folder or Hub id")
    if source.config.model_type not in EXPORTED_TYPES:
        raise models.ModelSourceError(f"--model {name!r} is a {source.config.model_type} model, which export does not "
                                       f"serve; it exports {', '.join(EXPORTED_TYPES)} models")
    return models.load_model(source).eval()


def export_model(model, out_dir: str | Path, fmt: str = "torch") -> dict[str, dict]:
    """Export `model`'s programs to `out_dir` in `fmt` ("torch" or "onnx"); returns and writes the manifest."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {}
    fast, LineageLinear.fast_cpu_inference = LineageLinear.fast_cpu_inference, False
    try:
        for name, module, args, input_names, output_names, dynamic in programs(model.eval()):
            with torch.no_grad():
                program = torch.export.export(module, args, dynamic_shapes=dynamic)
            path = out_dir / f"{name}.{'pt2' if fmt == 'torch' else 'onnx'}"
            if fmt == "torch":
                torch.export.save(program, path)
            else:
                _to_onnx(program, path, input_names, output_names)
            manifest[name] = {"file": path.name, "inputs": input_names, "outputs": output_names}
    finally:
        LineageLinear.fast_cpu_inference = fast
    (out_dir / "export.json").write_text(strict_json.dumps({"format": fmt, "model": type(model).__name__,
                                                     "programs": manifest}, indent=1))
    return manifest


def _to_onnx(program, path: Path, input_names: list[str], output_names: list[str]) -> None:
    if importlib.util.find_spec("onnxscript") is None:  # the dynamo exporter's dependency (it pulls in onnx)
        raise ImportError("--format onnx needs onnx and onnxscript: pip install 'lineage[onnx]'")
    with warnings.catch_warnings():
        # torch's own exporter (2.13) copies a deprecated pytree `LeafSpec`, a FutureWarning about torch's code
        warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)
        torch.onnx.export(program, f=str(path), input_names=input_names, output_names=output_names, dynamo=True,
                          external_data=False, verbose=False)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=__doc__.splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("--model", required=True, help="a saved model folder or Hub id (Lineage, or a supported "
                                                       "transformers checkpoint, converted on load)")
    parser.add_argument("--model_revision", default=None, help="Hub branch, tag or commit of --model")
    parser.add_argument("--output_dir", required=True, help="folder for the exported files")
    parser.add_switch("--overwrite_output_dir", help="replace an earlier output of this command (nothing else)")
    parser.add_argument("--format", default="torch", choices=FORMATS, help="torch: .pt2 ExportedPrograms; onnx: .onnx")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, dict]:
    args = parse_args(argv)
    folder = check_writer_output(args.output_dir, "export", overwrite=args.overwrite_output_dir)
    model = load_lineage_model(args.model, args.model_revision)
    with staged_output(folder, "export") as staging:
        manifest = export_model(model, staging, args.format)
    for name, entry in manifest.items():
        inputs, outputs = ", ".join(entry["inputs"]), ", ".join(entry["outputs"])
        print(f"{name}: {Path(args.output_dir) / entry['file']} ({inputs} -> {outputs})")
    return manifest


if __name__ == "__main__":
    run_script(main)
