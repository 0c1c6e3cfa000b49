"""`python -m train.benchmark` (train/benchmark.py over train/analysis/throughput.py): the command on tiny presets for
each task, with the reference, generation and the JSON table; its bad inputs; MFU in the table. The FLOP formula and
the GPU peak table: tests/train/run/test_flops.py. (Timings are not asserted: the machine is shared.)"""

import json
import re
from pathlib import Path

import pytest
from conftest import PRESETS

from train import benchmark
from train.analysis import throughput

ROW_FIELDS = {"ms_per_step", "tokens_per_s", "peak_memory_mib", "ms_each"}


def config_file(tmp_path: Path, name: str, **overrides) -> str:
    """A tiny preset with the overrides its transformers reference needs, as a config.json for `--model`."""
    fields = {**json.loads((PRESETS / f"{name}.json").read_text()), **overrides}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(fields))
    return str(path)


def run(tmp_path: Path, model: str, task: str, *extra: str) -> tuple[dict, dict]:
    out = tmp_path / "bench.json"
    returned = benchmark.main(["--model", model, "--task", task, "--batch_size", "2", "--seq_length", "8", "--steps",
                               "2", "--warmup", "1", "--json", str(out), *extra])
    written = json.loads(out.read_text())
    assert written.pop("written_by") == "lineage benchmark" and written == json.loads(json.dumps(returned))
    return written, returned


def check_training(result: dict, reference: bool) -> None:
    training = result["training"]
    assert set(training["lineage"]) == ROW_FIELDS | {"tflops"}  # no "mfu" on a CPU
    assert training["flops_per_step"] > 0 and training["lineage"]["tokens_per_s"] > 0
    assert len(training["lineage"]["ms_each"]) == 2  # --steps 2
    assert training["lineage"]["ms_per_step"] == pytest.approx(sum(training["lineage"]["ms_each"]) / 2)
    if reference:
        assert set(training["reference"]) == ROW_FIELDS | {"tflops"}
        assert training["ratio"] == pytest.approx(
            training["reference"]["ms_per_step"] / training["lineage"]["ms_per_step"])
    else:
        assert "reference" not in training and "ratio" not in training


def test_causal_lm_with_reference_generation_and_json(tmp_path, capsys):
    model = config_file(tmp_path, "gpt-tiny", intermediate_size=128)  # OpenAIGPT's feed-forward is 4 x hidden
    result, _ = run(tmp_path, model, "causal-lm", "--reference", "--generate", "--max_new_tokens", "4")
    assert result["reference_class"] == "OpenAIGPTLMHeadModel" and result["peak_tflops"] is None
    assert result["memory"] == "process peak RSS" and result["device"].startswith("cpu")
    check_training(result, reference=True)
    dynamic, static = result["generation"]["dynamic"], result["generation"]["static"]
    assert set(dynamic["lineage"]) == set(dynamic["reference"]) == ROW_FIELDS and dynamic["ratio"] > 0
    assert set(static["lineage"]) == ROW_FIELDS  # Lineage's forward compiles with the static cache
    assert "OpenAIGPTLMHeadModel" in static["not_run"]["reference"]  # OpenAIGPT has no cache to compile
    printed = capsys.readouterr().out
    assert "MFU" not in printed and "OpenAIGPTLMHeadModel" in printed and "generate (static cache)" in printed


def test_masked_lm_with_reference(tmp_path):
    result, _ = run(tmp_path, "bert-tiny", "mlm", "--reference")
    assert result["reference_class"] == "BertForMaskedLM" and "generation" not in result
    check_training(result, reference=True)


def test_profile_lists_each_models_operators_by_time(tmp_path, capsys):
    """`--profile`: one more step of each model under torch.profiler; on a CPU its aten operators (on a GPU its
    kernels), launches, busy and wall milliseconds, the top ones by time, in the JSON and the printed notes."""
    result, _ = run(tmp_path, "bert-tiny", "mlm", "--reference", "--profile")
    printed = capsys.readouterr().out
    for name, shown in (("lineage", "lineage"), ("reference", "BertForMaskedLM")):
        assert set(result["training"][name]) == ROW_FIELDS | {"tflops", "profile"}
        profile = result["training"][name]["profile"]
        assert set(profile) == {"wall_ms", "launches", "busy_ms", "top"}
        assert profile["wall_ms"] > 0 and profile["busy_ms"] > 0
        assert 0 < len(profile["top"]) <= throughput.PROFILE_TOP
        assert all(op.startswith("aten::") and calls >= 1 for op, calls, _ in profile["top"])
        times = [ms for *_, ms in profile["top"]]
        assert times == sorted(times, reverse=True)
        assert profile["launches"] >= sum(calls for _, calls, _ in profile["top"])
        assert f"profiled step, {shown}: {profile['launches']} launches" in printed


@pytest.mark.parametrize("flag, option", [("--sparse_prediction", "sparse_prediction"),
                                          ("--unpad_inputs", "unpad_inputs")])
def test_forward_options_reach_lineage_training_forward_only(tmp_path, monkeypatch, flag, option):
    """`--sparse_prediction` / `--unpad_inputs` time the forward the training commands run: the option reaches every
    Lineage training call and never the reference's."""
    seen = {}
    original = throughput.TrainingStep.__call__

    def recording(step):
        seen.setdefault(type(step.model).__name__, []).append(dict(step.options))
        original(step)

    monkeypatch.setattr(throughput.TrainingStep, "__call__", recording)
    result, _ = run(tmp_path, "bert-tiny", "mlm", "--reference", flag)
    assert result[option] is True
    assert seen["LineageBertForMaskedLM"] and all(o == {option: True} for o in seen["LineageBertForMaskedLM"])
    assert seen["BertForMaskedLM"] and all(o == {} for o in seen["BertForMaskedLM"])
    check_training(result, reference=True)


def test_seq2seq_with_reference(tmp_path):
    result, _ = run(tmp_path, "transformer-tiny", "seq2seq", "--config", "sinusoidal_layout=split", "--reference",
                    "--mixed_precision", "bf16")
    assert result["reference_class"] == "MarianMTModel" and result["mixed_precision"] == "bf16"
    check_training(result, reference=True)


@pytest.mark.parametrize("old, new", [("fp32", "no"), ("bf16", "bf16")])
def test_the_old_dtype_flag_is_mixed_precision(old, new):
    assert benchmark.make_parser().parse_args(["--model", "gpt-tiny", *LM, "--dtype", old]).mixed_precision == new


def test_rnn_generation_has_no_static_cache_row(tmp_path):
    result, _ = run(tmp_path, "rnn-tiny", "seq2seq", "--generate", "--max_new_tokens", "3")
    check_training(result, reference=False)
    assert set(result["generation"]["dynamic"]["lineage"]) == ROW_FIELDS
    assert set(result["generation"]["static"]) == {"not_run"}


LM = ["--task", "causal-lm"]


@pytest.mark.parametrize("extra, message", [
    (LM + ["--peak_tflops", "0"], "argument --peak_tflops: expected a number of TFLOP/s > 0, got '0'"),
    (LM + ["--peak_tflops", "-5"], "argument --peak_tflops: expected a number of TFLOP/s > 0"),
    (LM + ["--peak_tflops", "nan"], "argument --peak_tflops: expected a number of TFLOP/s > 0"),
    (LM + ["--peak_tflops", "100"], "--peak_tflops sets the GPU peak for MFU, which is not reported on a CPU"),
    (LM + ["--seq_length", "65"], r"--seq_length 65 is longer than the model's 64 positions"),
    (LM + ["--seq_length", "60", "--generate", "--max_new_tokens", "8"],
     r"--seq_length 60 \+ --max_new_tokens 8 is longer"),
    (["--task", "mlm"], "--task mlm needs a lineage-bert model"),
    (LM + ["--steps", "0"], "argument --steps: expected a number of steps >= 1, got '0'"),
    (LM + ["--config", "hidden_sise=64"], "--config: 'hidden_sise' is no field of lineage-gpt configs"),
    (LM + ["--max_new_tokens", "8"], "--max_new_tokens is the length of each timed generate call, read with "
                                     "--generate only"),
    (LM + ["--config", "hidden_size"], "--config expects KEY=VALUE"),
    (LM + ["--sparse_prediction"], "--sparse_prediction is a forward option of masked-LM and seq2seq models"),
    (LM + ["--unpad_inputs"], "--unpad_inputs is a forward option of Lineage BERT"),
    (LM + ["--mixed_precision", "fp16"], r"--mixed_precision: invalid choice: 'fp16' \(choose from '?no'?, '?bf16'?\)"),
    (LM + ["--dtype", "fp16"], r"--mixed_precision: invalid choice: 'fp16'"),
])
def test_bad_settings_are_refused_before_any_step(extra, message, capsys, monkeypatch):
    monkeypatch.setattr(benchmark, "build_models", lambda *a: pytest.fail("a model was built"))
    with pytest.raises(SystemExit):
        benchmark.main(["--model", "gpt-tiny", *extra])
    assert re.search(message, capsys.readouterr().err)


def test_compile_without_a_working_compiler_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(benchmark, "compiler_error", lambda device_type: "InductorError: no C++ compiler")
    monkeypatch.setattr(benchmark, "build_models", lambda *a: pytest.fail("a model was built"))
    with pytest.raises(SystemExit):
        benchmark.main(["--model", "gpt-tiny", "--task", "causal-lm", "--seq_length", "8", "--compile"])
    assert "--compile: torch.compile does not work" in capsys.readouterr().err


@pytest.mark.parametrize("model, task, extra, message", [
    ("bert-tiny", "mlm", ["--generate"], "--generate times text generation"),
    ("rnn-tiny", "seq2seq", ["--reference"], "--reference: transformers has no reference model for lineage-rnn"),
    ("gpt-tiny", "causal-lm", ["--reference"],
     "--reference: transformers' OpenAIGPT has no equivalent of `intermediate_size`=37 \\(OpenAIGPT: 128\\)"),
])
def test_settings_the_model_cannot_take_are_refused(model, task, extra, message, capsys):
    with pytest.raises(SystemExit):
        benchmark.main(["--model", model, "--task", task, "--seq_length", "8", "--steps", "1", *extra])
    assert re.search(message, capsys.readouterr().err)


def test_mfu_is_achieved_over_peak_and_shown_only_with_a_peak():
    row = throughput.summarize([0.5, 0.1, 0.2], tokens=1000, flops=4 * 10**12, peak=100.0, memory=1.0)
    assert row["ms_per_step"] == pytest.approx(200.0) and row["tokens_per_s"] == pytest.approx(5000.0)
    assert row["tflops"] == pytest.approx(20.0) and row["mfu"] == pytest.approx(0.2)
    assert "mfu" not in throughput.summarize([0.2], tokens=1, flops=10, peak=None, memory=1.0)
    result = {"memory": "cuda max_memory_allocated", "reference_class": None, "training": {"lineage": row}}
    assert "MFU" in benchmark.table(result, with_mfu=True) and "20.0%" in benchmark.table(result, with_mfu=True)
    assert "MFU" not in benchmark.table(result, with_mfu=False)
