"""`train.export`: torch.export round trips of every family's inference forward at shapes other than the traced
ones (BERT heads, GPT causal LM with and without cache, Transformer encoder and decoder step), greedy decoding
through the Transformer's loaded programs alone equal to `generate()`, ONNX through the dynamo exporter checked with
onnxruntime (1e-4), the command and its bad input."""

import json
import warnings

import pytest
import torch
from conftest import preset
from transformers import DynamicCache

from modeling import (
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageGptForCausalLM,
    LineageGptForSequenceClassification,
    LineageRnnForConditionalGeneration,
    LineageTransformerForConditionalGeneration,
)
from train import cli, export

TOL = {"atol": 1e-5, "rtol": 1e-5}


def ids(batch: int, length: int, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, 99, (batch, length), generator=generator)
    mask = torch.ones_like(tokens)
    mask[-1, -2:] = 0
    return tokens, mask


def load_programs(folder) -> dict:
    manifest = json.loads((folder / "export.json").read_text())["programs"]
    return {name: torch.export.load(folder / entry["file"]).module() for name, entry in manifest.items()}


@pytest.mark.parametrize("model_class", [LineageBertForSequenceClassification, LineageBertForQuestionAnswering,
                                         LineageGptForSequenceClassification])
def test_encoder_heads_round_trip(model_class, tmp_path):
    model = model_class(preset("bert-tiny" if "Bert" in model_class.__name__ else "gpt-tiny")).eval()
    manifest = export.export_model(model, tmp_path)
    program = load_programs(tmp_path)["model"]
    tokens, mask = ids(3, 9)  # the trace used (2, 6)
    inputs = {"input_ids": tokens, "attention_mask": mask}
    if "Bert" in model_class.__name__:
        inputs["token_type_ids"] = torch.zeros_like(tokens)
    assert manifest["model"]["inputs"] == list(inputs)
    with torch.no_grad():
        expected = model(**inputs)
        got = program(*inputs.values())
    assert len(got) == len(manifest["model"]["outputs"])
    for name, value in zip(manifest["model"]["outputs"], got):
        torch.testing.assert_close(value, expected[name], **TOL)


def test_gpt_decoder_with_and_without_cache(tmp_path):
    model = LineageGptForCausalLM(preset("gpt-tiny")).eval()
    export.export_model(model, tmp_path)
    programs = load_programs(tmp_path)
    prefix, prefix_mask = ids(3, 5)
    new, new_mask = ids(3, 2, seed=4)
    new_mask[-1] = 1
    with torch.no_grad():
        torch.testing.assert_close(programs["decoder"](prefix, prefix_mask), model(prefix, prefix_mask).logits, **TOL)
        cache = DynamicCache(config=model.config)
        model(prefix, prefix_mask, cache=cache, use_cache=True)
        past_keys = torch.stack([layer.keys for layer in cache.layers])  # (L, B, H, P, D)
        past_values = torch.stack([layer.values for layer in cache.layers])
        mask = torch.cat([prefix_mask, new_mask], dim=1)
        expected = model(new, mask, cache=cache, use_cache=True)
        logits, keys, values = programs["decoder_with_cache"](new, mask, past_keys, past_values)
    torch.testing.assert_close(logits, expected.logits, **TOL)
    torch.testing.assert_close(keys, torch.stack([layer.keys for layer in cache.layers]), **TOL)
    torch.testing.assert_close(values, torch.stack([layer.values for layer in cache.layers]), **TOL)
    assert keys.shape[3] == 7


@pytest.fixture(scope="module")
def transformer_export(tmp_path_factory) -> tuple:
    """A tiny Transformer (eos unset) and its loaded programs."""
    model = LineageTransformerForConditionalGeneration(preset("transformer-tiny")).eval()
    model.generation_config.eos_token_id = None
    folder = tmp_path_factory.mktemp("transformer")
    export.export_model(model, folder)
    return model, load_programs(folder)


def test_transformer_encoder_and_decoder_step(transformer_export):
    model, programs = transformer_export
    source, source_mask = ids(3, 10)
    target, _ = ids(3, 5, seed=5)
    with torch.no_grad():
        memory = programs["encoder"](source, source_mask)
        torch.testing.assert_close(memory, model.get_encoder()(source, source_mask).last_hidden_state, **TOL)
        expected = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target).logits
        torch.testing.assert_close(programs["decoder"](target, memory, source_mask), expected, **TOL)


@pytest.mark.parametrize(("batch", "length"), [(1, 1), (2, 6)])
def test_transformer_greedy_decoding_through_the_programs_alone_equals_generate(transformer_export, batch, length):
    model, programs = transformer_export
    source, _ = ids(batch, length)
    source_mask = torch.ones_like(source)
    source_mask[1:, -2:] = 0  # a second row padded by two
    with torch.no_grad():
        expected = model.generate(source, attention_mask=source_mask, do_sample=False, max_new_tokens=6)
        memory = programs["encoder"](source, source_mask)
        target = torch.full((batch, 1), model.config.decoder_start_token_id)
        for _ in range(6):
            logits = programs["decoder"](target, memory, source_mask)
            target = torch.cat([target, logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(target, expected)


def grow_batch(name: str, tensor: torch.Tensor) -> torch.Tensor:
    axis = 1 if name.startswith("past_") else 0  # cache tensors are (L, B, H, P, D)
    return torch.cat([tensor, tensor.narrow(axis, 0, 1)], dim=axis)


ONNX_CASES = [
    pytest.param(LineageBertForSequenceClassification, "bert-tiny", id="bert"),
    pytest.param(LineageGptForCausalLM, "gpt-tiny", id="gpt", marks=pytest.mark.slow),
    pytest.param(LineageTransformerForConditionalGeneration, "transformer-tiny", id="transformer",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("model_class", "name"), ONNX_CASES)
def test_onnx_matches_eager_in_onnxruntime(model_class, name, tmp_path):
    pytest.importorskip("onnxscript")
    onnxruntime = pytest.importorskip("onnxruntime")
    model = model_class(preset(name)).eval()
    with warnings.catch_warnings(record=True) as caught:  # nothing the user could act on
        warnings.simplefilter("always")
        manifest = export.export_model(model, tmp_path, "onnx")
    assert [str(w.message) for w in caught] == []
    reference = {program: (module, args) for program, module, args, *_ in export.programs(model)}
    for program, entry in manifest.items():
        module, args = reference[program]
        args = tuple(grow_batch(n, a) for n, a in zip(entry["inputs"], args))  # batch 3 where the trace had 2
        session = onnxruntime.InferenceSession(str(tmp_path / entry["file"]), providers=["CPUExecutionProvider"])
        feeds = {n: a.numpy() for n, a in zip(entry["inputs"], args)}
        got = session.run(entry["outputs"], feeds)
        with torch.no_grad():
            expected = module(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for value, reference_value in zip(got, expected):
            torch.testing.assert_close(torch.from_numpy(value), reference_value, atol=1e-4, rtol=1e-4)


def test_command_writes_the_files_and_refuses_bad_input(tmp_path, capsys):
    folder = tmp_path / "bert"
    LineageBertForSequenceClassification(preset("bert-tiny")).save_pretrained(folder)
    export.main(["--model", str(folder), "--output_dir", str(tmp_path / "out")])
    assert (tmp_path / "out" / "model.pt2").is_file() and "model: " in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "export.json").read_text())["format"] == "torch"
    with pytest.raises(SystemExit):
        export.main(["--model", str(folder), "--output_dir", str(tmp_path / "o"), "--format", "tflite"])
    assert "--format: invalid choice: 'tflite'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is neither a preset .* nor a Hub repo id"):
        export.main(["--model", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")])
    (tmp_path / "roberta").mkdir()
    (tmp_path / "roberta" / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    (tmp_path / "roberta" / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="model_type 'roberta'.*Lineage cannot convert; supported checkpoints"):
        export.main(["--model", str(tmp_path / "roberta"), "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="is a preset, which has no trained weights"):
        export.main(["--model", "bert-tiny", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="format must be one of torch, onnx, got 'tflite'"):
        export.export_model(LineageBertForSequenceClassification(preset("bert-tiny")), tmp_path / "o", "tflite")


def test_a_family_export_does_not_serve_is_refused_naming_the_model_before_any_file(tmp_path):
    folder = tmp_path / "rnn"
    LineageRnnForConditionalGeneration(preset("rnn-tiny")).save_pretrained(folder)
    with pytest.raises(SystemExit) as refused:
        cli.main(["export", "--model", str(folder), "--output_dir", str(tmp_path / "out")])
    message = str(refused.value)
    assert message.startswith("lineage export: error: --model ") and "lineage-rnn" in message
    assert not (tmp_path / "out").exists()
