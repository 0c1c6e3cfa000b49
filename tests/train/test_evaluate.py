"""`lineage evaluate`: the harness path reports what `lm_eval --model hf` reports for the same folder (numbers and task
hashes) on the shipped offline tasks, writes results.json and the plots, and touches the model folder only with
`--write_card true` (its README.md alone, entries replaced on a rerun); bad arguments are refused by name before any
model is loaded; translation, classification and masked-LM folders are scored without the harness."""

import glob
import hashlib
import io
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import datasets
import pytest
import torch
from conftest import model_folder
from PIL import Image
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling import (
    LineageBertForMaskedLM,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageGptForCausalLM,
    LineageTransformerForConditionalGeneration,
)
from train import evaluate
from train.analysis import evaluation_report, harness
from train.analysis.experiment import translate
from train.analysis.model_scores import pseudo_perplexity
from train.analysis.translation_scores import score_translations
from train.data.corpus import generate_records
from train.run.publish import pipeline_tag, read_card_metadata
from train.run.run_folder import OutputDirError

lm_eval = pytest.importorskip("lm_eval", reason="needs the eval extra (lm-evaluation-harness)")
TASKS = "lineage_cloze,lineage_translation,lineage_perplexity"


@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> Path:
    return model_folder(tmp_path_factory.mktemp("models"), "gpt", LineageGptForCausalLM, 400,
                        max_position_embeddings=128)


def fingerprints(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_harness_path_reports_what_lm_eval_reports(gpt, tmp_path, monkeypatch):
    before = fingerprints(gpt)
    out = evaluate.main(["--model", str(gpt), "--tasks", TASKS, "--limit", "3", "--output_dir", str(tmp_path / "ours")])
    assert fingerprints(gpt) == before
    ours = json.loads((out / "results.json").read_text())
    monkeypatch.setattr(sys, "argv", [
        "lm_eval", "--model", "hf", "--model_args", f"pretrained={gpt},trust_remote_code=True", "--tasks", TASKS,
        "--include_path", str(harness.SHIPPED_TASKS), "--limit", "3", "--output_path", str(tmp_path / "theirs"),
        "--log_samples"])
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
    theirs = json.loads(Path(glob.glob(str(tmp_path / "theirs" / "*" / "results_*.json"))[0]).read_text())
    assert ours["harness"]["results"] == theirs["results"]
    assert ours["harness"]["task_hashes"] == theirs["task_hashes"]
    assert set(ours["scores"]) == set(TASKS.split(","))
    assert ours["scores"]["lineage_cloze"]["acc"] == theirs["results"]["lineage_cloze"]["acc,none"]
    assert ours["harness"]["lm_eval_version"] == lm_eval.__version__ and "torch" in ours["versions"]
    assert (out / "scores.png").stat().st_size > 0


def test_max_seq_length_with_tasks_is_the_harness_max_length_as_lm_eval_takes_it(gpt, tmp_path, monkeypatch):
    """`--max_seq_length 8 --tasks ...` scores as `lm_eval --model_args ...,max_length=8` (before: taken and ignored,
    the model's positions used); without it, the harness's own default."""
    ours = {length: json.loads((evaluate.main([
        "--model", str(gpt), "--tasks", "lineage_perplexity", "--limit", "3", "--output_dir", str(tmp_path / length),
        *(["--max_seq_length", length] if length != "default" else [])]) / "results.json").read_text())["harness"]
        for length in ("default", "8")}
    monkeypatch.setattr(sys, "argv", [
        "lm_eval", "--model", "hf", "--model_args", f"pretrained={gpt},trust_remote_code=True,max_length=8",
        "--tasks", "lineage_perplexity", "--include_path", str(harness.SHIPPED_TASKS), "--limit", "3",
        "--output_path", str(tmp_path / "theirs")])
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
    theirs = json.loads(Path(glob.glob(str(tmp_path / "theirs" / "*" / "results_*.json"))[0]).read_text())
    assert ours["8"]["results"] == theirs["results"]
    assert ours["8"]["results"] != ours["default"]["results"]


def test_the_harness_path_run_outside_a_git_repository_prints_no_complaint_of_git(gpt, tmp_path, monkeypatch, capfd):
    """lm-eval records the working folder's commit by running `git describe`, which printed `fatal: not a git
    repository ...` on the command's stderr; the hash recorded stays lm-eval's (none here), and stderr is the user's
    again after the call."""
    monkeypatch.chdir(tmp_path)
    out = evaluate.main(["--model", str(gpt), "--tasks", "lineage_perplexity", "--limit", "2", "--output_dir",
                         str(tmp_path / "eval")])
    os.write(2, b"stderr after the harness\n")
    shown = capfd.readouterr()
    assert "not a git repository" not in shown.out + shown.err and "stderr after the harness" in shown.err
    assert json.loads((out / "results.json").read_text())["harness"]["git_hash"] is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_quiet_git_records_the_commit_lm_eval_records_in_a_repository(tmp_path, monkeypatch, capfd):
    from lm_eval import evaluator

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "--allow-empty",
                    "-m", "start"], cwd=repo, check=True)
    monkeypatch.chdir(repo)
    commit = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, check=True).stdout.strip()
    with harness.quiet_git():
        assert evaluator.get_git_commit_hash() == commit
    monkeypatch.chdir(tmp_path)
    with harness.quiet_git():
        assert evaluator.get_git_commit_hash() is None
    assert "not a git repository" not in capfd.readouterr().err


def test_write_card_changes_only_the_card_and_compare_draws_the_baseline(gpt, tmp_path, monkeypatch):
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    evaluation_report.write_results(baseline / "results.json", {"model": "older", "scores": {
        "lineage_cloze": {"acc": 0.5}}})
    drawn = []
    monkeypatch.setattr(evaluation_report, "plot_scores",
                        lambda scores, name, path, base=None, source=None: drawn.append(base))
    before = fingerprints(gpt)
    evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", "--limit", "2", "--output_dir",
                   str(tmp_path / "eval"), "--write_card", "true", "--compare", str(baseline)])
    after = fingerprints(gpt)
    assert {name for name in after if after[name] != before.get(name)} == {"README.md"}
    assert drawn[0]["model"] == "older"
    scores = json.loads((tmp_path / "eval" / "results.json").read_text())["scores"]
    results = read_card_metadata(gpt / "README.md")["model-index"][0]["results"]
    assert [r["dataset"]["type"] for r in results] == ["lineage_cloze"]
    assert {m["type"]: m["value"] for m in results[0]["metrics"]} == {k: round(v, 4) for k, v in
                                                                      scores["lineage_cloze"].items()}


@pytest.mark.parametrize(("head", "tag"), [(LineageBertForSequenceClassification, "text-classification"),
                                           (LineageBertForTokenClassification, "token-classification"),
                                           (LineageBertForQuestionAnswering, "question-answering")])
def test_the_card_names_the_task_of_the_models_head(tmp_path, monkeypatch, head, tag):
    folder = model_folder(tmp_path, "bert", head, 400)
    monkeypatch.setattr(evaluate, "score", lambda *args: {"scores": {"held-out": {"accuracy": 0.5}}})
    evaluate.main(["--model", str(folder), "--output_dir", str(tmp_path / "eval"), "--write_card", "true"])
    results = read_card_metadata(folder / "README.md")["model-index"][0]["results"]
    assert [r["task"]["type"] for r in results] == [tag]


def test_every_head_evaluate_scores_has_a_hub_task():
    assert all(pipeline_tag(f"Some{suffix}") != "feature-extraction" for suffix in evaluate.KINDS)


def test_a_rewritten_card_keeps_other_entries_and_one_table(tmp_path):
    card = tmp_path / "README.md"
    card.write_text("---\nlibrary_name: transformers\nmodel-index:\n- name: run\n  results:\n  - task: {type: x}\n"
                    "    dataset: {name: trained, type: trained}\n    metrics: [{type: loss, value: 1.0}]\n---\n\n"
                    "# run\n\nText the run wrote.\n")
    for value in (0.25, 0.75):
        evaluation_report.write_card(tmp_path, {"lineage_cloze": {"acc": value}}, "text-generation", {"limit": 2})
    text = card.read_text()
    results = read_card_metadata(card)["model-index"][0]["results"]
    assert [r["dataset"]["type"] for r in results] == ["trained", "lineage_cloze"]
    assert results[1]["metrics"] == [{"type": "acc", "value": 0.75}]
    assert text.count(evaluation_report.BEGIN) == 1 and "| lineage_cloze | acc | 0.7500 |" in text
    assert "Text the run wrote." in text and read_card_metadata(card)["library_name"] == "transformers"


class NoModel:
    """Stands in for the harness's model registry: loading a model fails the test."""

    def __call__(self, *args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")


@pytest.fixture
def no_model(monkeypatch):
    import lm_eval.api.registry

    monkeypatch.setattr(lm_eval.api.registry, "get_model", NoModel())


def test_bad_arguments_are_refused_by_name_before_a_model_is_loaded(gpt, tmp_path, capsys, no_model):
    out = ["--output_dir", str(tmp_path / "out")]
    with pytest.raises(harness.HarnessError, match="--tasks: 'no_such_task' is no task"):
        evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze,no_such_task", *out])
    task = tmp_path / "uncached.yaml"
    task.write_text("task: uncached\ndataset_path: nobody/not-in-the-cache\noutput_type: loglikelihood\n"
                    "test_split: test\ndoc_to_text: '{{text}}'\ndoc_to_target: '{{text}}'\n")
    with pytest.raises(harness.HarnessError, match="--tasks .*uncached.yaml.*: its data cannot be read"):
        evaluate.main(["--model", str(gpt), "--tasks", str(task), *out])
    with pytest.raises(evaluate.EvaluateError, match="--model .* is not a saved model folder"):
        evaluate.main(["--model", str(tmp_path), "--tasks", "lineage_cloze", *out])
    for flag, value in (("--limit", "0"), ("--batch_size", "0"), ("--num_fewshot", "-1"), ("--length_penalty", "nan"),
                        ("--length_penalty", "-inf")):
        with pytest.raises(SystemExit):
            evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", flag, value, *out])
        assert f"argument {flag}" in capsys.readouterr().err
    with pytest.raises(evaluate.EvaluateError,
                       match=r"--max_seq_length \(default: the run's\) is 129 but --model has 128 positions"):
        evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", "--max_seq_length", "129", *out])
    with pytest.raises(evaluate.EvaluateError, match="--tasks is required for a causal LM"):
        evaluate.main(["--model", str(gpt), *out])
    for device, refusal in (("bogus", "--device 'bogus' is no device torch runs a model on: give cpu, cuda"),
                            ("cuda:99", r"--device 'cuda:99': this machine has (no cuda device|\d+ cuda device)")):
        with pytest.raises(evaluate.EvaluateError, match=refusal):  # (before: torch's error, the model loaded)
            evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", "--device", device, *out])
    with pytest.raises(OutputDirError, match=r"--output_dir .*inside lies in an input of lineage evaluate \(--model: "):
        evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", "--output_dir", str(gpt / "inside")])
    writable = os.access
    with mock.patch.object(evaluate.os, "access", lambda path, mode: path != str(gpt) and writable(path, mode)):
        with pytest.raises(evaluate.EvaluateError, match="--write_card true writes the card into --model .* which is "
                                                         "not writable by this user"):
            evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", "--write_card", "true", *out])
    assert not (tmp_path / "out").exists() and not (gpt / "inside").exists()


def test_a_causal_lms_perplexity_on_a_text_file_is_the_task_yaml_the_docs_show(gpt, tmp_path):
    """--text_file for a causal LM is refused pointing to the task YAML of docs/evaluation.md (before: '--tasks is
    required' alone), and that YAML, given the file, scores each of its lines as a document."""
    text = tmp_path / "held-out.txt"
    text.write_text("Anna was born in Oslo.\nShe lives in Bergen.\nHe sleeps.\n")
    with pytest.raises(evaluate.EvaluateError, match="--text_file .* is read for a masked LM's pseudo-perplexity; a "
                                                     "causal LM's perplexity on a text file is a harness task: write a "
                                                     "task YAML that reads it"):
        evaluate.main(["--model", str(gpt), "--text_file", str(text), "--output_dir", str(tmp_path / "refused")])
    page = (Path(__file__).parents[2] / "docs" / "evaluation.md").read_text()
    shown = page.split("### Perplexity of your own text")[1].split("```yaml\n")[1].split("```")[0]
    task = tmp_path / "held_out_perplexity.yaml"
    task.write_text(shown.replace("/data/held-out.txt", str(text)))
    out = evaluate.main(["--model", str(gpt), "--tasks", str(task), "--output_dir", str(tmp_path / "eval")])
    report = json.loads((out / "results.json").read_text())
    assert report["harness"]["n-samples"]["held_out_perplexity"]["original"] == 3
    assert math.isfinite(report["scores"]["held_out_perplexity"]["byte_perplexity"])
    assert not (tmp_path / "refused").exists()


def test_without_lm_eval_the_message_names_the_extra(gpt, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    with pytest.raises(harness.HarnessError, match=r"lineage\[eval\]"):
        evaluate.main(["--model", str(gpt), "--tasks", "lineage_cloze", "--output_dir", str(tmp_path / "out")])


@pytest.mark.parametrize("beam_search", ["transformers", "gnmt"])
def test_a_translation_model_is_scored_with_sacrebleu_and_chrf(tmp_path, beam_search):
    folder = model_folder(tmp_path, "transformer", LineageTransformerForConditionalGeneration, 300)
    argv = ["--model", str(folder), "--eval_size", "6", "--num_beams", "2", "--length_penalty", "0.7",
            "--max_new_tokens", "5", "--beam_search", beam_search, "--output_dir", str(tmp_path / "eval")]
    out = evaluate.main(argv)
    report = json.loads((out / "results.json").read_text())
    rows = generate_records("translation", "test", seed=42, size=6)  # a run's default seed
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    hypotheses = translate(model, AutoTokenizer.from_pretrained(folder), [r["source"] for r in rows], 2, 5,
                           length_penalty=0.7, beam_search=beam_search)
    expected = score_translations(hypotheses, [r["target"] for r in rows])
    assert report["scores"]["translation"] == pytest.approx({k: expected[k] for k in ("bleu", "chrf", "exact_match")})
    assert report["translation"]["bleu_signature"] == expected["bleu_signature"]
    assert report["translation"]["length_penalty"] == 0.7 and report["translation"]["beam_search"] == beam_search
    assert sum(r["sentences"] for r in report["translation"]["bleu_by_length"]) == 6
    with Image.open(out / "bleu_by_length.png") as image:  # the command, as results.json records it
        assert image.text["Source"] == report["command"] == shlex.join(["lineage", "evaluate", *argv])


def test_a_max_seq_length_that_leaves_no_text_beside_the_template_is_refused_before_the_model_loads(tmp_path):
    """As finetune refuses it (before: scored, each row cut into its special tokens)."""
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3)
    with mock.patch("transformers.AutoModelForSequenceClassification.from_pretrained", side_effect=AssertionError):
        with pytest.raises(ValueError, match=r"--max_seq_length \(default: the run's\) is 4, below the minimum of 5 "
                                             r"for nli with a bert template \(3 special tokens and at least one token "
                                             r"of each of 2 text\(s\)\)"):
            evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", "embedded:nli", "--eval_size", "4",
                           "--max_seq_length", "4", "--output_dir", str(tmp_path / "eval")])
    assert not (tmp_path / "eval").exists()


def test_a_source_longer_than_the_positions_is_cut_as_a_run_cuts_its_sources(tmp_path, capsys):
    """A source past --max_seq_length (default: the run's, else the model's positions) is cut to it and counted
    (before: the encoder refused it, 'input_ids has 281 positions', a traceback after the model had loaded)."""
    folder = model_folder(tmp_path, "transformer", LineageTransformerForConditionalGeneration, 300)
    sources = [" ".join(["seventy-two dogs"] * 40), "three cats"]
    (tmp_path / "long.en").write_text("\n".join(sources) + "\n")
    (tmp_path / "long.de").write_text("zweiundsiebzig Hunde\ndrei Katzen\n")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    for given, cut in ((None, 64), ("2", 2)):
        out = evaluate.main(["--model", str(folder), "--dataset", str(tmp_path / "long"), "--source_column", "en",
                             "--target_column", "de", "--num_beams", "1", "--max_new_tokens", "3",
                             *(["--max_seq_length", given] if given else []), "--predictions", "--output_dir",
                             str(tmp_path / f"eval-{cut}")])
        report = json.loads((out / "results.json").read_text())["translation"]
        assert report["max_source_length"] == cut and report["sources_cut"] == (1 if cut == 64 else 2)
        assert f"long: cut {report['sources_cut']} of 2 sources to their first {cut} tokens" in capsys.readouterr().out
        own = translate(model, tokenizer, sources, 1, 3, max_length=cut)
        assert [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").read_text().splitlines()] == own


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _five_translations(root: Path):
    folder = model_folder(root, "transformer", LineageTransformerForConditionalGeneration, 300)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    sources = [r["source"] for r in generate_records("translation", "test", size=5)]
    return lambda: translate(model, AutoTokenizer.from_pretrained(folder), sources, 1, 3, batch_size=2)


def _five_pseudo_perplexities(root: Path):
    folder = model_folder(root, "bert", LineageBertForMaskedLM, 400)
    model = LineageBertForMaskedLM.from_pretrained(folder)
    texts = ["the cat sat on the mat", "Anna was born in Lisbon.", "She moved.", "It rained.", "We left early."]
    return lambda: pseudo_perplexity(model, AutoTokenizer.from_pretrained(folder), texts, max_length=32, batch_size=4)


@pytest.mark.parametrize("terminal", [True, False])
@pytest.mark.parametrize("scoring, bar", [(_five_translations, "translate"),
                                          (_five_pseudo_perplexities, "pseudo-perplexity")])
def test_a_long_scoring_counts_its_samples_on_a_terminal_only(tmp_path, monkeypatch, scoring, bar, terminal):
    """A long evaluation shows how far it is (tqdm on a terminal), and writes nothing into a log or a pipe."""
    run = scoring(tmp_path)
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    run()
    shown = stderr.getvalue()
    assert (bar in shown and "0/5 [" in shown) if terminal else shown == ""  # (a bar of the 5 samples)


def held_out_text(tmp_path):
    path = tmp_path / "held-out.txt"
    path.write_text("A held-out line.\n")
    return path


def test_a_classifier_is_scored_on_a_data_set_by_label_name(tmp_path):
    names = ["entailment", "neutral", "contradiction"]
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3,
                          id2label=dict(enumerate(reversed(names))), label2id={n: i for i, n in
                                                                                enumerate(reversed(names))})
    out = evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", "embedded:nli", "--eval_size", "12",
                         "--output_dir", str(tmp_path / "eval")])
    figures = json.loads((out / "results.json").read_text())["scores"]["nli"]
    assert 0 <= figures["accuracy"] <= 1 and 0 <= figures["f1"] <= 1 and math.isfinite(figures["loss"])
    (folder / "recipe.yaml").write_text("task: nli\nmax_seq_length: 64\n")  # as a finetune run saves it
    default = evaluate.main(["--model", str(folder), "--dataset", "embedded:nli", "--eval_size", "12", "--output_dir",
                             str(tmp_path / "eval4")])
    assert json.loads((default / "results.json").read_text())["scores"]["nli"] == figures
    with pytest.raises(evaluate.EvaluateError, match="--task 'token-classification' needs a TokenClassification "
                                                     "head; --model is a LineageBertForSequenceClassification: give "
                                                     "--task sequence-classification or nli"):
        evaluate.main(["--model", str(folder), "--task", "token-classification", "--output_dir",
                       str(tmp_path / "eval5")])
    with pytest.raises(evaluate.EvaluateError, match="--num_beams, --text_file: read by pseudo-perplexity and "
                                                     "translation only, but --model \\(a classifier model\\) is "
                                                     "scored by classification here: leave them out"):
        evaluate.main(["--model", str(folder), "--num_beams", "5", "--text_file", str(held_out_text(tmp_path)),
                       "--output_dir", str(tmp_path / "eval6")])
    with pytest.raises(evaluate.EvaluateError, match="--split 'bogus': embedded:nli has the splits train, "
                                                     "validation, test"):
        evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", "embedded:nli", "--split", "bogus",
                       "--output_dir", str(tmp_path / "eval3")])
    flipped = tmp_path / "flipped.json"
    flipped.write_text("\n".join(json.dumps({**r, "label": "maybe"}) for r in generate_records("nli", "test",
                                                                                                 size=3)))
    with pytest.raises(evaluate.EvaluateError, match="label 'maybe' of column 'label' is no class of the model"):
        evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", str(flipped), "--output_dir",
                       str(tmp_path / "eval2")])


def test_a_classifier_is_scored_on_the_gpu_of_the_index_given(tmp_path, monkeypatch):
    """--device cuda:1 makes cuda:1 the current device before Accelerate places the model and batches on `cuda`, its
    backend's current device (before: cuda:0 whatever the index); checked where the index goes, on any machine."""
    names = ["entailment", "neutral", "contradiction"]
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3,
                          id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    made_current = []
    monkeypatch.setattr(evaluate, "device_refusal", lambda name: None)  # a machine with no second GPU has cuda:1
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    out = evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", "embedded:nli", "--eval_size", "4",
                         "--device", "cuda:1", "--output_dir", str(tmp_path / "eval")])
    assert made_current == [torch.device("cuda:1")]
    assert "nli" in json.loads((out / "results.json").read_text())["scores"]


def test_question_lengths_a_model_cannot_take_are_refused_with_advice_within_its_positions(tmp_path):
    """As finetune advises: a question of 64 tokens needs windows of 90, more than a model of 64 positions takes; a
    --doc_stride the question leaves no room for is refused with the stride that fits; the question-answering flags
    are refused for another task, which would ignore them."""
    folder = model_folder(tmp_path, "bert", LineageBertForQuestionAnswering, 400)
    with pytest.raises(evaluate.EvaluateError) as refused:
        evaluate.main(["--model", str(folder), "--max_query_length", "64", "--output_dir", str(tmp_path / "eval")])
    assert str(refused.value).endswith("; the model's 64 positions (max_position_embeddings) cannot hold the 90 tokens "
                                       "that question needs: set max_query_length to at most 44")
    with pytest.raises(evaluate.EvaluateError, match=r"^--max_seq_length, --max_query_length and --doc_stride "
                                                     r"\(default: the run's\): .* doc stride of 40 tokens "
                                                     r"\(doc_stride, .*: set max_query_length to at most 20, or "
                                                     r"doc_stride to at most 36$"):
        evaluate.main(["--model", str(folder), "--max_query_length", "24", "--doc_stride", "40", "--output_dir",
                       str(tmp_path / "eval")])
    classifier = model_folder(tmp_path / "nli", "bert", LineageBertForSequenceClassification, 400, num_labels=3)
    with pytest.raises(evaluate.EvaluateError, match=r"^--max_query_length, --doc_stride, --version_2_with_negative: "
                                                     r"read by question answering only, but --task is 'nli' here: "
                                                     r"leave them out$"):
        evaluate.main(["--model", str(classifier), "--task", "nli", "--max_query_length", "24", "--doc_stride", "8",
                       "--version_2_with_negative", "--output_dir", str(tmp_path / "eval")])
    assert not (tmp_path / "eval").exists()
    with pytest.raises(evaluate.EvaluateError, match=r"^--null_score_diff_threshold: read by question answering "
                                                     r"only, but --task is 'nli' here: leave it out$"):
        evaluate.main(["--model", str(classifier), "--task", "nli", "--null_score_diff_threshold", "1",
                       "--output_dir", str(tmp_path / "eval")])
    assert not (tmp_path / "eval").exists()


def test_a_qa_model_without_its_recipe_is_cut_and_strided_as_its_config_says(tmp_path, monkeypatch):
    """A model from the Hub, or copied without recipe.yaml, carries its run's question length and stride in its config
    (`task_specific_params`, the saved pipeline's defaults): lineage evaluate encodes with them (the default 64 leaves
    no room in 64 positions), and its flags still win."""
    from train import finetune

    folder = model_folder(tmp_path, "bert", LineageBertForQuestionAnswering, 400, task_specific_params={
        "question-answering": {"max_question_len": 24, "doc_stride": 8}})
    assert not (folder / "recipe.yaml").exists()
    lengths, encode = [], finetune.tokenize_dataset
    monkeypatch.setattr(finetune, "tokenize_dataset", lambda *a, **k: lengths.append(
        (k["max_query_length"], k["doc_stride"])) or encode(*a, **k))
    common = ["--model", str(folder), "--dataset", "embedded:qa", "--eval_size", "4", "--max_seq_length", "64"]
    evaluate.main([*common, "--output_dir", str(tmp_path / "eval")])
    evaluate.main([*common, "--max_query_length", "20", "--doc_stride", "4", "--output_dir", str(tmp_path / "eval2")])
    assert lengths == [(24, 8), (20, 4)]


def test_a_qa_models_saved_no_answer_threshold_is_the_default_and_the_flag_wins(tmp_path, monkeypatch, capsys):
    """The run saves run_qa.py's null_score_diff_threshold beside handle_impossible_answer (config.json): lineage
    evaluate answers by it, on questions with answers or without, records it in results.json, and its flag wins; a
    NaN or infinite one, or one where no question gets the empty answer (it would act on nothing), is refused before
    anything is written."""
    from train import finetune

    folder = model_folder(tmp_path, "bert", LineageBertForQuestionAnswering, 400, task_specific_params={
        "question-answering": {"max_question_len": 24, "handle_impossible_answer": True,
                               "null_score_diff_threshold": 2.5}})
    rows = generate_records("qa", "test", size=12)
    assert any(not r["answers"]["text"] for r in rows)
    labelled, unlabelled, answerable = (tmp_path / f"{name}.jsonl" for name in ("labelled", "unlabelled", "answerable"))
    labelled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    unlabelled.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "answers"}) + "\n" for r in rows))
    answerable.write_text("".join(json.dumps(r) + "\n" for r in rows if r["answers"]["text"]))
    used, metrics = [], finetune.answer_metrics
    monkeypatch.setattr(finetune, "answer_metrics", lambda *a: used.append(a[2:]) or metrics(*a))
    common = ["--model", str(folder), "--max_seq_length", "64"]
    out = evaluate.main([*common, "--dataset", str(labelled), "--output_dir", str(tmp_path / "a")])
    report = json.loads((out / "results.json").read_text())
    assert report["data"]["null_score_diff_threshold"] == 2.5
    assert {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(report["scores"][
        "question-answering"])
    evaluate.main([*common, "--dataset", str(labelled), "--null_score_diff_threshold", "-1.5", "--output_dir",
                   str(tmp_path / "b")])
    evaluate.main([*common, "--dataset", str(unlabelled), "--predictions", "--output_dir", str(tmp_path / "c")])
    assert "no answer where [CLS] scores higher by more than 2.5 (the run's, saved in config.json)" in (
        capsys.readouterr().out)
    evaluate.main([*common, "--dataset", str(unlabelled), "--predictions", "--null_score_diff_threshold", "-1000000.0",
                   "--output_dir", str(tmp_path / "d")])
    assert set(json.loads((tmp_path / "d" / "predictions.json").read_text()).values()) == {""}
    assert used == [(True, 2.5), (True, -1.5), (True, 2.5), (True, -1e6)]
    refusals = {("--dataset", str(answerable)): f"every question of --dataset {answerable} has an answer, so each is "
                                                f"answered: leave it out (or give --version_2_with_negative true with "
                                                f"it)",
                ("--dataset", str(labelled), "--version_2_with_negative", "false"):
                    "--version_2_with_negative false answers every question: leave it out"}
    for flags, why in refusals.items():
        with pytest.raises(evaluate.EvaluateError, match=f"^--null_score_diff_threshold 1.0 shifts the no-answer "
                                                         f"rule, but {re.escape(why)}$"):
            evaluate.main([*common, *flags, "--null_score_diff_threshold", "1", "--output_dir", str(tmp_path / "e")])
    for value in ("nan", "inf", "x"):
        with pytest.raises(SystemExit):
            evaluate.main([*common, "--dataset", str(labelled), "--null_score_diff_threshold", value,
                           "--output_dir", str(tmp_path / "e")])
        assert (f"argument --null_score_diff_threshold: expected a finite number (a difference of logits), got "
                f"{value!r}") in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
    evaluate.main([*common, "--dataset", str(answerable), "--output_dir", str(tmp_path / "f")])  # the saved one: no
    assert "null_score_diff_threshold" not in json.loads((tmp_path / "f" / "results.json").read_text())["data"]


def test_a_classifier_is_padded_and_cut_as_its_run_and_past_its_positions_is_refused(tmp_path, monkeypatch):
    """The run's pad_to_multiple_of (its recipe.yaml) pads the batches scored, and its max_seq_length is the default
    cut; a multiple that would pad rows of --max_seq_length tokens past the model's positions is refused before the
    model is loaded, naming the longest."""
    from train.data import collators

    widths = []

    class Recording(collators.PaddingCollator):
        def __call__(self, features, seeds=None):
            batch = super().__call__(features, seeds)
            widths.append(batch["input_ids"].shape[1])
            return batch

    monkeypatch.setattr(collators, "PaddingCollator", Recording)
    names = ["entailment", "neutral", "contradiction"]
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3,
                          id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    scored = ["--model", str(folder), "--dataset", "embedded:nli", "--eval_size", "12", "--batch_size", "4"]
    (folder / "recipe.yaml").write_text("task: nli\npad_to_multiple_of: 24\n")
    with pytest.raises(evaluate.EvaluateError) as refused:
        evaluate.main([*scored, "--output_dir", str(tmp_path / "refused")])
    assert str(refused.value) == ("--max_seq_length (default: the run's) is 64: a batch of 64-token rows "
                                  "would be padded to 72 (the run's pad_to_multiple_of 24, its recipe.yaml), beyond "
                                  "--model's 64 positions; give --max_seq_length at most 48")
    assert widths == [] and not (tmp_path / "refused").exists()
    (folder / "recipe.yaml").write_text("task: nli\npad_to_multiple_of: 32\n")
    evaluate.main([*scored, "--max_seq_length", "50", "--output_dir", str(tmp_path / "eval")])
    assert widths == [64, 64, 64]  # rows of at most 50 tokens (unpadded: 50, 50 and 45)
    (folder / "recipe.yaml").write_text("task: nli\nmax_seq_length: 20\n")
    widths.clear()
    evaluate.main([*scored, "--output_dir", str(tmp_path / "as-run")])
    assert widths == [20, 20, 20]  # cut as the run cut its rows, not at the model's 64 positions


def test_a_local_file_is_recorded_as_read_by_its_path_with_no_split_and_a_saved_dataset_dict_by_its_split(tmp_path):
    """A local data file is one split whatever --split names (by default test): results.json and the card record the
    file read and no split; of a saved DatasetDict, or the embedded corpus, the split read is recorded."""
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3)
    rows = generate_records("nli", "validation", size=6)
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(json.dumps(row) for row in rows))
    out = evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", str(dev), "--write_card", "true",
                         "--output_dir", str(tmp_path / "file")])
    assert json.loads((out / "results.json").read_text())["data"] == {"dataset": str(dev), "rows": 6, "task": "nli"}
    card = (folder / "README.md").read_text()
    assert read_card_metadata(folder / "README.md")["model-index"][0]["results"][0]["dataset"] == {
        "name": "dev.jsonl", "type": "dev.jsonl"}
    assert "(dataset dev.jsonl, date " in card and "split" not in card
    saved = tmp_path / "saved"
    datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)}).save_to_disk(saved)
    out = evaluate.main(["--model", str(folder), "--task", "nli", "--dataset", str(saved), "--split", "validation",
                         "--output_dir", str(tmp_path / "saved-eval")])
    assert json.loads((out / "results.json").read_text())["data"] == {"dataset": str(saved), "split": "validation",
                                                                      "rows": 6, "task": "nli"}
    translator = model_folder(tmp_path, "transformer", LineageTransformerForConditionalGeneration, 300)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(row) for row in generate_records("translation", "validation", size=2)))
    for source, split in ((str(pairs), {}), ("embedded:translation", {"split": "test"})):
        out = evaluate.main(["--model", str(translator), "--dataset", source, "--eval_size", "2", "--max_new_tokens",
                             "3", "--output_dir", str(tmp_path / f"translation-{len(split)}")])
        read = json.loads((out / "results.json").read_text())["translation"]
        assert {k: v for k, v in read.items() if k in ("dataset", "split")} == {"dataset": source, **split}


def test_a_translation_without_max_new_tokens_fits_the_decoder_and_more_is_refused_by_name(tmp_path):
    """The default length is 64 tokens, at most the decoder's positions less its start token (before: 64 on a
    64-position decoder, which generate() refused after the model was loaded); a longer --max_new_tokens is refused by
    name before any model is loaded, and nothing is written."""
    folder = model_folder(tmp_path, "transformer", LineageTransformerForConditionalGeneration, 300)
    positions = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    out = evaluate.main(["--model", str(folder), "--eval_size", "2", "--num_beams", "1", "--output_dir",
                         str(tmp_path / "eval")])
    assert json.loads((out / "results.json").read_text())["translation"]["max_new_tokens"] == min(64, positions - 1)
    refusal = f"--max_new_tokens is {positions} .* give at most {positions - 1}"
    with pytest.raises(evaluate.EvaluateError, match=refusal):
        evaluate.main(["--model", str(folder), "--max_new_tokens", str(positions), "--output_dir",
                       str(tmp_path / "eval2")])
    assert not (tmp_path / "eval2").exists()


def test_a_translator_of_few_positions_runs_a_harness_generation_task(tmp_path):
    """lm_eval asks an encoder-decoder for its encoder context + max_gen_toks tokens, more than a 64-position decoder
    has (before: generate() refused after the model was loaded); the request is capped at the decoder's positions."""
    folder = model_folder(tmp_path, "transformer", LineageTransformerForConditionalGeneration, 300)
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 64
    out = evaluate.main(["--model", str(folder), "--tasks", "lineage_translation", "--limit", "2", "--device", "cpu",
                         "--output_dir", str(tmp_path / "eval")])
    figures = json.loads((out / "results.json").read_text())["scores"]["lineage_translation"]
    assert 0 <= figures["exact_match"] <= 1 and 0 <= figures["chrf"] <= 100


def test_pseudo_perplexity_takes_each_line_of_the_text_file_as_a_sample(tmp_path, capfd):
    """--text_file is one sample per line, blank lines (BERT's document breaks) skipped (before: a blank line made each
    paragraph one sample); a pretraining folder's NSP head is named as left out, not in transformers' load report."""
    folder = model_folder(tmp_path, "bert", LineageBertForPreTraining, 400)
    text = tmp_path / "held-out.txt"
    lines = ["the cat sat on the mat", "Anna was born in Lisbon in 1950.", "", "She moved to Oslo.", ""]
    text.write_text("\n".join(lines))
    out = evaluate.main(["--model", str(folder), "--text_file", str(text), "--output_dir", str(tmp_path / "eval")])
    assert json.loads((out / "results.json").read_text())["data"]["texts"] == sum(1 for line in lines if line)
    printed = capfd.readouterr()
    assert "LOAD REPORT" not in printed.out + printed.err and "left out" in printed.out


def test_a_uniform_masked_lm_has_the_vocabulary_size_as_pseudo_perplexity(tmp_path):
    folder = model_folder(tmp_path, "bert", LineageBertForMaskedLM, 400)
    model = LineageBertForMaskedLM.from_pretrained(folder)
    with torch.no_grad():  # every logit 0: each token has probability 1 / vocabulary wherever it is masked
        model.get_output_embeddings().weight.zero_()
        model.get_output_embeddings().bias.zero_()
    model.save_pretrained(folder)
    text = tmp_path / "held-out.txt"
    text.write_text("the cat sat on the mat\nAnna was born in Lisbon in 1950.\n")
    out = evaluate.main(["--model", str(folder), "--text_file", str(text), "--batch_size", "3", "--output_dir",
                         str(tmp_path / "eval")])
    figures = json.loads((out / "results.json").read_text())["scores"]["pseudo_perplexity"]
    vocabulary = model.get_output_embeddings().weight.shape[0]
    assert figures["pseudo_perplexity"] == pytest.approx(vocabulary, rel=1e-4) and figures["tokens"] > 10


def test_a_runs_card_rewritten_is_recorded_in_its_manifest(tmp_path):
    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    (model / "README.md").write_text("# run\n")
    (tmp_path / "run" / "run.json").write_text(json.dumps({"wrote": {"model/README.md": [6, "0"]}}))
    evaluation_report.write_card(model, {"lineage_cloze": {"acc": 0.5}}, "text-generation", {})
    wrote = json.loads((tmp_path / "run" / "run.json").read_text())["wrote"]
    assert wrote["model/README.md"][0] == (model / "README.md").stat().st_size > 6


def test_the_cards_table_shows_a_count_as_a_whole_number():
    section = evaluation_report.evaluation_section({"pseudo_perplexity": {"pseudo_perplexity": 3.5, "tokens": 28}},
                                                   {"text file": "held-out.txt"})
    assert "| pseudo_perplexity | tokens | 28 |" in section and "text file held-out.txt" in section
    assert "| pseudo_perplexity | pseudo_perplexity | 3.5000 |" in section


def test_an_undefined_figure_is_drawn_as_undefined_beside_a_baseline_that_wrote_it_as_null(tmp_path):
    """This run's correlation is NaN; the `--compare` folder's results.json, strict JSON, holds null for its own."""
    baseline = evaluation_report.write_results(tmp_path / "results.json", {"model": "older", "scores": {
        "regression": {"pearson": math.nan, "mse": 1.5}}})
    older = evaluation_report.read_baseline(str(tmp_path))
    assert older["scores"]["regression"]["pearson"] is None and "NaN" not in baseline.read_text()
    drawn = evaluation_report.plot_scores({"regression": {"pearson": math.nan, "mse": 1.25}}, "newer",
                                          tmp_path / "scores.png", older)
    assert drawn.stat().st_size > 0


@pytest.mark.parametrize("recipe, seed", [("seed: 7\n", 7), (None, 42)])
def test_the_embedded_corpus_is_drawn_with_the_runs_seed(tmp_path, recipe, seed):
    """A run draws its embedded rows with its recipe's seed (default 42): `lineage evaluate` of its folder scores the
    same rows (a folder of no run: the default seed)."""
    if recipe is not None:
        (tmp_path / "recipe.yaml").write_text(recipe)
    args = evaluate.command_parser().parse_args(["--model", str(tmp_path), "--split", "validation", "--eval_size", "5",
                                              "--output_dir", str(tmp_path / "eval")])
    rows = evaluate._rows(args, "embedded:translation", [("source", "text")], "--source_column")
    assert list(rows["source"]) == [r["source"] for r in generate_records("translation", "validation", seed, 5)]


def test_an_eval_size_beyond_the_data_scores_every_row_and_says_so(tmp_path, capsys):
    """`--eval_size 50` of a file of 9 rows scores the 9, said with both counts (as run_glue.py's min() caps it,
    but silently); one within it cuts silently to the rows asked."""
    data = tmp_path / "nli.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in generate_records("nli", "test", size=9)))
    for size, count in (("50", 9), ("4", 4)):
        args = evaluate.command_parser().parse_args(["--model", str(tmp_path), "--eval_size", size, "--output_dir",
                                                     str(tmp_path / "eval")])
        assert len(evaluate._rows(args, str(data), [("premise", "text")], "--text_column")) == count
    said = capsys.readouterr().out
    assert f"--eval_size 50: {data} has only 9 rows, fewer than asked: scoring all 9" in said
    assert "--eval_size 4:" not in said


def test_unlabelled_rows_are_skipped_on_request_and_the_runs_columns_are_the_default(tmp_path, capsys):
    """SNLI's layout: `label` -1 where no gold label exists, other column names (here `sentence1`, `sentence2`, the
    run's recipe keys): refused naming the way out, scored on the labelled rows with --skip_unlabeled, with the
    columns of the run's recipe.yaml unless flags name others."""
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3)  # LABEL_0...
    (folder / "recipe.yaml").write_text("task: nli\ntext_column: sentence1\ntext_pair_column: sentence2\n")
    rows = [{"sentence1": r["premise"], "sentence2": r["hypothesis"], "label": -1 if i % 3 == 0 else r["label"]}
            for i, r in enumerate(generate_records("nli", "test", size=9))]
    data = tmp_path / "snli.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    base = ["--model", str(folder), "--dataset", str(data)]
    with pytest.raises(ValueError, match="an unlabelled row.*skip_unlabeled"):
        evaluate.main([*base, "--output_dir", str(tmp_path / "refused")])
    out = evaluate.main([*base, "--skip_unlabeled", "--output_dir", str(tmp_path / "eval")])
    assert json.loads((out / "results.json").read_text())["data"]["rows"] == 6
    assert "skipped 3 rows labelled -1" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no column 'premise'"):  # a flag names another column
        evaluate.main([*base, "--text_column", "premise", "--skip_unlabeled", "--output_dir", str(tmp_path / "e2")])
    # the embedded corpus is read with the task's own columns (premise, hypothesis), not the run's: its named labels
    # are what this model of generic classes refuses
    with pytest.raises(evaluate.EvaluateError, match="label 'entailment' of column 'label' is no class of the model"):
        evaluate.main(["--model", str(folder), "--dataset", "embedded:nli", "--output_dir", str(tmp_path / "e3")])


def test_a_card_names_each_scored_data_set_and_split_and_replaces_only_the_same_one(tmp_path):
    """Scores of one task on two data sets (MNLI matched, mismatched) are two model-index entries, each naming its
    data set, configuration and split, as the Hub reads them; scoring one of them again replaces that one only."""
    matched = {"name": "nyu-mll/glue", "type": "nyu-mll/glue", "config": "mnli", "split": "validation_matched"}
    mismatched = {**matched, "split": "validation_mismatched"}
    for dataset, value in ((matched, 0.5), (mismatched, 0.6), (matched, 0.7)):
        evaluation_report.write_card(tmp_path, {"nli": {"accuracy": value}}, "text-classification", {}, dataset)
    results = read_card_metadata(tmp_path / "README.md")["model-index"][0]["results"]
    assert [(r["dataset"], r["metrics"][0]["value"]) for r in results] == [(mismatched, 0.6), (matched, 0.7)]


def test_a_written_card_reads_back_in_huggingface_hub_and_replaces_the_runs_entry_of_the_same_data(tmp_path):
    """The entries `--write_card` adds are the Hub's model-index: `ModelCard.load` parses them into eval results
    (before: each named a source without the URL huggingface_hub requires, and loading the card raised). Scoring
    the task and data set the run's card already scores replaces the run's entry: one row per task and data set."""
    from huggingface_hub import ModelCard

    dataset = {"name": "embedded:nli", "type": "embedded:nli", "split": "validation"}
    card = tmp_path / "README.md"
    card.write_text("---\nlibrary_name: transformers\nmodel-index:\n- name: run\n  results:\n"
                    "  - task: {type: text-classification}\n"
                    f"    dataset: {json.dumps(dataset)}\n    metrics: [{{type: accuracy, value: 0.5}}]\n"
                    "  - task: {type: text-classification}\n    dataset: {name: other, type: other}\n"
                    "    metrics: [{type: accuracy, value: 0.25}]\n---\n\n# run\n")
    evaluation_report.write_card(tmp_path, {"nli": {"accuracy": 0.75, "f1": 0.5}}, "text-classification", {}, dataset)
    loaded = ModelCard.load(card)
    found = {(r.dataset_name, r.metric_type): r.metric_value for r in loaded.data.eval_results}
    assert found == {("other", "accuracy"): 0.25, ("embedded:nli", "accuracy"): 0.75, ("embedded:nli", "f1"): 0.5}


def test_the_runs_own_training_file_is_scored_with_a_notice_and_its_held_out_rows_alone_without(tmp_path, capsys):
    """A run that trained on a file held out its first eval_size rows: scoring the file (by another spelling of its
    path) says how many rows scored it trained on and how to score the held-out ones, which --split train
    --eval_size N scores without a word; a split other than train is refused for a file, which has one."""
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3)
    data = tmp_path / "nli.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in generate_records("nli", "test", size=10)))
    (folder / "recipe.yaml").write_text(f"task: nli\ntrain_file: {data}\neval_size: 4\ntrain_size: 6\n")
    spelled = str(tmp_path / "bert" / ".." / "nli.jsonl")
    base = ["--model", str(folder), "--dataset", spelled]
    evaluate.main([*base, "--output_dir", str(tmp_path / "all")])
    assert (f"Note: {spelled} is the data {folder} was trained on (train_file in its recipe.yaml): 6 of the 10 rows "
            f"read are rows it trained on, so these figures are training figures; its first 4 rows were held out of "
            f"training: --split train --eval_size 4 scores those alone") in capsys.readouterr().out
    out = evaluate.main([*base, "--split", "train", "--eval_size", "4", "--output_dir", str(tmp_path / "held")])
    assert json.loads((out / "results.json").read_text())["data"]["rows"] == 4
    assert "Note:" not in capsys.readouterr().out
    evaluate.main([*base, "--eval_size", "5", "--output_dir", str(tmp_path / "five")])
    assert "1 of the 5 rows read are rows it trained on" in capsys.readouterr().out
    with pytest.raises(evaluate.EvaluateError, match=f"--split 'validation': {spelled} is local data of one split .* "
                                                     "give --split train --eval_size N to score its first N rows"):
        evaluate.main([*base, "--split", "validation", "--output_dir", str(tmp_path / "refused")])


def test_skip_unlabeled_defaults_to_the_runs_and_false_overrides_it(tmp_path, capsys):
    """A run that skipped its rows labelled -1 (`skip_unlabeled: true` in its recipe.yaml) is scored on its data
    without them unless --skip_unlabeled false says otherwise (a class -1 is then refused, as without the key)."""
    folder = model_folder(tmp_path, "bert", LineageBertForSequenceClassification, 400, num_labels=3)
    (folder / "recipe.yaml").write_text("task: nli\nskip_unlabeled: true\n")
    rows = [{**r, "label": -1 if i % 3 == 0 else i % 3} for i, r in enumerate(generate_records("nli", "test", size=9))]
    data = tmp_path / "snli.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = evaluate.main(["--model", str(folder), "--dataset", str(data), "--output_dir", str(tmp_path / "eval")])
    assert json.loads((out / "results.json").read_text())["data"]["rows"] == 6
    assert "skipped 3 rows labelled -1" in capsys.readouterr().out
    with pytest.raises(ValueError, match="an unlabelled row.*skip_unlabeled"):
        evaluate.main(["--model", str(folder), "--dataset", str(data), "--skip_unlabeled", "false", "--output_dir",
                       str(tmp_path / "refused")])
