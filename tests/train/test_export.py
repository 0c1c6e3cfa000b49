"""`train.export`: torch.export round trips of every family's inference forward at shapes other than the traced
ones (BERT heads; GPT causal LM without cache, its prefill and its one-token cached step over pasts of 1 and more;
Transformer encoder and decoder step), greedy generations driven by the loaded programs alone equal to `generate()`,
ONNX through the dynamo exporter checked with onnxruntime (1e-4), the command and its bad input."""

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


@pytest.fixture(scope="module")
def gpt_export(tmp_path_factory) -> tuple:
    """A tiny GPT causal LM (eos unset: every generation runs its full length), its manifest and loaded programs."""
    model = LineageGptForCausalLM(preset("gpt-tiny")).eval()
    model.generation_config.eos_token_id = None
    folder = tmp_path_factory.mktemp("gpt")
    return model, export.export_model(model, folder), load_programs(folder)


def stacked(cache: DynamicCache) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache's keys and values as the programs take them: (L, B, H, P, D) each."""
    return torch.stack([layer.keys for layer in cache.layers]), torch.stack([layer.values for layer in cache.layers])


def test_gpt_decoder_and_prefill_match_the_model(gpt_export):
    model, manifest, programs = gpt_export
    assert list(manifest) == ["decoder", "prefill", "decoder_with_cache"]
    for length in (1, 5):  # the trace used 3
        prompt, prompt_mask = ids(3, length)
        prompt_mask[-1] = 1
        prompt_mask[-1, :length - 1] = 0  # the last row left-padded, as generate() takes a batch
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            expected = model(prompt, prompt_mask, cache=cache, use_cache=True).logits
            torch.testing.assert_close(programs["decoder"](prompt, prompt_mask), expected, **TOL)
            logits, keys, values = programs["prefill"](prompt, prompt_mask)
        torch.testing.assert_close(logits, expected, **TOL)
        torch.testing.assert_close((keys, values), stacked(cache), **TOL)


@pytest.mark.parametrize("past", [1, 2, 3, 7])
def test_gpt_cached_step_takes_any_past(gpt_export, past):
    model, _, programs = gpt_export
    prefix, prefix_mask = ids(2, past)
    prefix_mask[-1] = 1
    prefix_mask[-1, 0] = 0 if past > 1 else 1
    new, _ = ids(2, 1, seed=4)
    mask = torch.cat([prefix_mask, torch.ones_like(new)], dim=1)
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(prefix, prefix_mask, cache=cache, use_cache=True)
        past_keys, past_values = stacked(cache)
        expected = model(new, mask, cache=cache, use_cache=True).logits
        logits, keys, values = programs["decoder_with_cache"](new, mask, past_keys, past_values)
    torch.testing.assert_close(logits, expected, **TOL)
    torch.testing.assert_close((keys, values), stacked(cache), **TOL)
    assert keys.shape[3] == past + 1


def greedy_through_programs(prefill, step, prompt: torch.Tensor, mask: torch.Tensor, steps: int) -> torch.Tensor:
    """The loop of docs/using.md: a cached greedy generation driven by the exported programs alone."""
    logits, keys, values = prefill(prompt, mask)
    tokens = prompt
    for _ in range(steps):
        token = logits[:, -1:].argmax(-1)  # (B, 1)
        tokens, mask = torch.cat([tokens, token], dim=1), torch.cat([mask, torch.ones_like(token)], dim=1)
        logits, keys, values = step(token, mask, keys, values)
    return tokens


@pytest.mark.parametrize(("batch", "length"), [(1, 1), (1, 6), (2, 4)])
def test_gpt_greedy_generation_through_the_programs_alone_equals_generate(gpt_export, batch, length):
    model, _, programs = gpt_export
    prompt, _ = ids(batch, length, seed=length)
    mask = torch.ones_like(prompt)
    mask[1:, :2] = 0  # a second row left-padded by two, as generate() takes a batch
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=mask, do_sample=False, max_new_tokens=8)
        got = greedy_through_programs(programs["prefill"], programs["decoder_with_cache"], prompt, mask, 8)
    assert expected.shape == (batch, length + 8)
    assert torch.equal(got, expected)


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
