"""Every entry script for a few steps on the tiny presets: pretrain -> fine-tune chains for BERT and GPT,
translation with BLEU, token classification and QA; the output folders load with `trust_remote_code` in a
process without this project, and carry a model card with Hub metadata."""

import json
from pathlib import Path

import pytest
import torch
import transformers
import yaml
from conftest import run_clean_process
from PIL import Image

from train import evaluate, finetune, pretrain_bert, pretrain_gpt, train_translation
from train.data.corpus import generate_records
from train.run.environment import versions
from train.run.publish import read_card_metadata

torch.set_num_threads(1)
QUIET = ("--progress_bar", "false")


def _run(main, recipe: str, out: Path, *extra: str):
    return main(["--recipe", recipe, "--output_dir", str(out), *QUIET, *extra])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    out = {}
    out["bert"] = _run(pretrain_bert.main, "bert-pretrain-tiny", root / "bert")
    out["bert-nli"] = _run(finetune.main, "bert-finetune-nli-tiny", root / "bert-nli", "--model", str(out["bert"][1]))
    out["gpt"] = _run(pretrain_gpt.main, "gpt-pretrain-tiny", root / "gpt")
    out["gpt-nli"] = _run(finetune.main, "gpt-finetune-nli-tiny", root / "gpt-nli", "--model", str(out["gpt"][1]))
    out["mt"] = _run(train_translation.main, "transformer-translation-tiny", root / "mt")
    return out


def test_output_folder_holds_model_code_tokenizer_recipe_card_and_logs(runs):
    results, folder = runs["bert"]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "modeling_lineage_bert.py", "layers.py", "tokenizer.json",
            "tokenizer_config.json", "recipe.yaml", "README.md", "loss_curve.png", "results.json"} <= names
    assert yaml.safe_load((folder / "recipe.yaml").read_text())["model"] == "bert-tiny"
    run_dir = folder.parent
    records = [json.loads(line) for line in (run_dir / "logs/metrics.jsonl").read_text().splitlines()]
    # a record every logging_steps (2), at each checkpoint (save_steps 3) and at the last step
    assert [r["step"] for r in records if "loss" in r] == [2, 3, 4, 6]
    assert any("tokens_per_s" in r for r in records) and any("eval_nsp_accuracy" in r for r in records)
    assert all(r["lr"] >= 0 for r in records if "lr" in r)
    assert list((run_dir / "logs" / "lineage").rglob("events.out.tfevents*"))
    assert (run_dir / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    with Image.open(run_dir / "loss_curve.png") as image:  # the run's command, as its run.json records it
        assert image.text["Source"] == json.loads((run_dir / "run.json").read_text())["command"]
    assert results["steps"] == 6 and results["train_loss"] > 0
    recorded = json.loads((folder / "results.json").read_text())["versions"]
    assert recorded == versions() and recorded["transformers"] == transformers.__version__
    assert f"transformers {transformers.__version__}" in (folder / "README.md").read_text()


def test_pretraining_predicts_sparsely_and_saves_only_the_architecture(runs):
    for run in ("bert", "mt"):  # both trained with sparse_prediction, a call option that no config holds
        saved = json.loads((runs[run][1] / "config.json").read_text())
        assert "sparse_prediction" not in saved and "unpad_inputs" not in saved
    results, folder = runs["bert"]
    assert 0 <= results["eval_mlm_accuracy"] <= 1
    labels = torch.tensor([[-100, 5, -100, 7], [3, -100, -100, -100]])
    logits = torch.nn.functional.one_hot(torch.tensor([[1, 5, 2, 9], [3, 4, 0, 8]]), 12).float()  # every position
    out = pretrain_bert.predict(None, {"labels": labels}, type("Out", (), {"logits": logits})())
    assert out["mlm_predictions"].tolist() == [[1, 5, 2, 9], [3, 4, 0, 8]]  # evaluation's logits: nothing to undo
    assert out["mlm_labels"] is labels


def test_finetune_starts_from_the_pretrained_weights(runs):
    from safetensors.torch import load_file

    pretrained = load_file(runs["bert"][1] / "model.safetensors")
    _, folder = runs["bert-nli"]
    config = json.loads((folder / "config.json").read_text())
    assert config["id2label"] == {"0": "entailment", "1": "neutral", "2": "contradiction"}
    tuned = load_file(folder / "model.safetensors")
    key = "bert.embeddings.position_embeddings.weight"
    assert key in pretrained and key in tuned
    # a few fine-tuning steps move the weights only a little from the pretrained ones (not a fresh init)
    assert (tuned[key] - pretrained[key]).abs().max() < 0.05
    assert "eval_accuracy" in runs["bert-nli"][0] and "eval_f1" in runs["bert-nli"][0]


def test_gpt_runs_report_perplexity_samples_and_auxiliary_loss(runs):
    results, _ = runs["gpt"]
    assert results["eval_perplexity"] > 1 and isinstance(results["sample_0"], str)
    results, folder = runs["gpt-nli"]
    assert json.loads((folder / "config.json").read_text())["lm_loss_weight"] == 0.5
    assert 0 <= results["eval_accuracy"] <= 1


def test_translation_reports_bleu_from_beam_search(runs):
    results, folder = runs["mt"]
    assert 0 <= results["eval_bleu"] <= 100 and "sample_0" in results
    assert json.loads((folder / "config.json").read_text())["model_type"] == "lineage-transformer"


def test_model_card_metadata(runs):
    for name, tag, metric in (("bert", "fill-mask", "nsp_accuracy"), ("bert-nli", "text-classification", "accuracy"),
                              ("gpt", "text-generation", "perplexity"), ("mt", "translation", "bleu")):
        results, folder = runs[name]
        meta = read_card_metadata(folder / "README.md")
        assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == tag
        assert meta["datasets"] and metric in meta["metrics"]
        reached = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
        assert reached[metric] == pytest.approx(results[f"eval_{metric}"], abs=1e-4)
        assert "trust_remote_code=True" in (folder / "README.md").read_text()


def test_output_folders_load_without_this_project(runs, tmp_path):
    code = f"""
import torch
from transformers import (AutoModelForCausalLM, AutoModelForPreTraining, AutoModelForSeq2SeqLM,
                          AutoModelForSequenceClassification, AutoTokenizer)
bert = {str(runs['bert'][1])!r}; nli = {str(runs['bert-nli'][1])!r}; gpt = {str(runs['gpt'][1])!r}
gnli = {str(runs['gpt-nli'][1])!r}; mt = {str(runs['mt'][1])!r}
AutoModelForPreTraining.from_pretrained(bert, trust_remote_code=True)
for folder in (nli, gnli):
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    enc = tok(["Anna lives in Oslo."], ["Anna lives in Oslo."], return_tensors="pt")
    print("OUT", type(model).__module__.startswith("transformers_modules"), model(**enc).logits.shape)
tok = AutoTokenizer.from_pretrained(gpt, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(gpt, trust_remote_code=True)
print("OUT", model.generate(**tok(["Anna"], add_special_tokens=False, return_tensors="pt"), max_new_tokens=3).shape)
tok = AutoTokenizer.from_pretrained(mt, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(mt, trust_remote_code=True)
print("OUT", model.generate(**tok(["seven"], return_tensors="pt"), num_beams=2, max_new_tokens=4).shape[0])
"""
    lines = [line[4:] for line in run_clean_process(code, tmp_path).splitlines() if line.startswith("OUT ")]
    assert lines[0] == "True torch.Size([1, 3])" and lines[1] == "True torch.Size([1, 3])"
    assert lines[2].startswith("torch.Size([1,") and lines[3] == "1"


def test_token_classification_and_question_answering(tmp_path):
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "ner", "--task", "token-classification",
                           "--dataset", "embedded:ner", "--max_steps", "3", "--save_steps", "0")
    assert "eval_f1" in results and len(json.loads((folder / "config.json").read_text())["id2label"]) == 7
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "qa", "--task", "question-answering",
                           "--dataset", "embedded:qa", "--max_steps", "3", "--save_steps", "0",
                           "--train_size", "60", "--eval_size", "20", "--max_query_length", "32")
    assert 0 <= results["eval_exact_match"] <= 1
    assert read_card_metadata(folder / "README.md")["pipeline_tag"] == "question-answering"


def test_bad_finetune_inputs_fail_before_training(tmp_path):
    from train.run.recipes import RecipeError

    with pytest.raises(RecipeError, match="task"):
        _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "a", "--task", "summarization")
    with pytest.raises(RecipeError, match="max_seq_length.*64 positions"):
        _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "b", "--max_seq_length", "128")
    assert not (tmp_path / "b" / "logs").exists()
    with pytest.raises(RecipeError, match=r"recipe keys 'max_seq_length' and 'max_query_length': max_seq_length 64 "
                                          r"cannot hold a question of max_query_length 64 tokens, 3 special tokens "
                                          r"and more context than the doc stride of 16 tokens .*; the model's 64 "
                                          r"positions \(max_position_embeddings\) cannot hold the 90 tokens that "
                                          r"question needs: set max_query_length to at most 44$"):
        _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "c", "--task", "question-answering")
    with pytest.raises(RecipeError, match=r"^recipe keys 'max_seq_length', 'max_query_length' and 'doc_stride': "
                                          r"max_seq_length 64 cannot hold a question of max_query_length 24 tokens, "
                                          r"3 special tokens and more context than the doc stride of 40 tokens "
                                          r"\(doc_stride, .*: set max_query_length to at most 20, or doc_stride to at "
                                          r"most 36$"):
        _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "c", "--task", "question-answering",
             "--max_query_length", "24", "--doc_stride", "40")
    assert not (tmp_path / "c").exists()


def test_questions_longer_than_the_windows_are_cut_and_lineage_evaluate_cuts_them_as_the_run_did(tmp_path, capsys):
    """Questions of 100+ tokens (every other one) in windows of 64 tokens made the tokenizer panic; cut to the
    recipe's max_query_length they train and are scored, and `lineage evaluate` cuts them as the run's config.json
    says (with the default 64 it would refuse, or panic), scoring the run's validation file as the run did. Each says
    once how many questions of each file it cut; results.json and the card count the training questions cut."""
    def long_questions(split: str, size: int) -> Path:
        rows = generate_records("qa", split, size=size)
        for row in rows[::2]:
            row["question"] += " " + " ".join(f"Mind detail {i} of {row['title']}." for i in range(25))
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path

    train, validation = long_questions("train", 40), long_questions("validation", 12)
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "qa", "--task", "question-answering",
                           "--train_file", str(train), "--validation_file", str(validation), "--max_query_length",
                           "32", "--max_steps", "3", "--save_steps", "0")
    assert 0 <= results["eval_exact_match"] <= 1 and 0 <= results["eval_f1"] <= 1
    assert yaml.safe_load((folder / "recipe.yaml").read_text())["max_query_length"] == 32
    said = capsys.readouterr().out
    assert said.count(f"{train}: cut 20 of 40 questions to their first 32 tokens (max_query_length)\n") == 1
    assert said.count(f"{validation}: cut 6 of 12 questions to their first 32 tokens (max_query_length)\n") == 1
    assert results["questions_cut"] == json.loads((folder / "results.json").read_text())["questions_cut"] == 20
    assert "| questions_cut | 20 |" in (folder / "README.md").read_text()
    assert json.loads((folder / "config.json").read_text())["task_specific_params"] == {
        "question-answering": {"max_question_len": 32, "handle_impossible_answer": True,
                               "null_score_diff_threshold": 0.0}}
    long = json.loads(validation.read_text().splitlines()[0])  # over 100 tokens, too long for a window of 64
    answer = transformers.pipeline("question-answering", model=str(folder), trust_remote_code=True)(
        question=long["question"], context=long["context"])
    assert long["context"][answer["start"]:answer["end"]] == answer["answer"]
    out = evaluate.main(["--model", str(folder), "--dataset", str(validation), "--output_dir", str(tmp_path / "eval")])
    assert f"{validation}: cut 6 of 12 questions to their first 32 tokens" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["data"]["questions_cut"] == 6
    figures = json.loads((out / "results.json").read_text())["scores"]["question-answering"]
    assert (figures["exact_match"], figures["f1"]) == (results["eval_exact_match"], results["eval_f1"])
    assert figures["loss"] == pytest.approx(results["eval_loss"], rel=1e-6)
    with pytest.raises(evaluate.EvaluateError, match=r"--max_seq_length and --max_query_length \(default: the "
                                                     r"run's\): max_seq_length 64 cannot hold a question of "
                                                     r"max_query_length 64 tokens"):
        evaluate.main(["--model", str(folder), "--dataset", str(validation), "--max_query_length", "64",
                       "--output_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()


def test_a_runs_doc_stride_is_saved_and_the_pipeline_and_lineage_evaluate_stride_as_it_did(tmp_path, monkeypatch):
    """The run records its doc_stride beside max_question_len (transformers' QA pipeline's names): the saved pipeline
    windows with it, and `lineage evaluate` encodes with it (`--doc_stride` overrides), scoring the run's validation
    rows as the run did."""
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "qa", "--task", "question-answering",
                           "--dataset", "embedded:qa", "--max_steps", "2", "--save_steps", "0", "--train_size", "40",
                           "--eval_size", "12", "--max_query_length", "24", "--doc_stride", "8")
    assert json.loads((folder / "config.json").read_text())["task_specific_params"] == {
        "question-answering": {"max_question_len": 24, "doc_stride": 8, "handle_impossible_answer": True,
                               "null_score_diff_threshold": 0.0}}
    pipe = transformers.pipeline("question-answering", model=str(folder), trust_remote_code=True)
    assert pipe._lengths(None, None, "Who?") == (64, 8)
    strides, encode = [], finetune.tokenize_dataset
    monkeypatch.setattr(finetune, "tokenize_dataset", lambda *a, **k: strides.append(k["doc_stride"]) or encode(*a,
                                                                                                                **k))
    common = ["--model", str(folder), "--dataset", "embedded:qa", "--split", "validation", "--eval_size", "12",
              "--batch_size", "32"]
    out = evaluate.main([*common, "--output_dir", str(tmp_path / "eval")])
    figures = json.loads((out / "results.json").read_text())["scores"]["question-answering"]
    assert (figures["exact_match"], figures["f1"]) == (results["eval_exact_match"], results["eval_f1"])
    assert figures["loss"] == pytest.approx(results["eval_loss"], rel=1e-6)
    evaluate.main([*common, "--doc_stride", "16", "--output_dir", str(tmp_path / "eval16")])
    assert strides == [8, 16]


def test_a_test_set_without_answers_is_answered_by_the_runs_no_answer_rule(tmp_path, capsys):
    """A run on data with unanswerable questions scores them by no answer where [CLS] scores higher, and saves so
    (config.json's handle_impossible_answer): the saved pipeline gives no answer there without being told, and
    `lineage evaluate --predictions` on questions without their answers answers them as on the same questions with
    answers; `--version_2_with_negative false` answers every one."""
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "qa", "--task", "question-answering",
                           "--dataset", "embedded:qa", "--max_steps", "3", "--save_steps", "0", "--train_size", "60",
                           "--eval_size", "20", "--max_query_length", "32")
    assert "eval_no_answer_exact_match" in results
    assert json.loads((folder / "config.json").read_text())["task_specific_params"]["question-answering"][
        "handle_impossible_answer"] is True
    rows = generate_records("qa", "test", size=20)
    pipe = transformers.pipeline("question-answering", model=str(folder), trust_remote_code=True)
    questions = [{"question": row["question"], "context": row["context"]} for row in rows]
    default = pipe(questions, max_seq_len=64)
    assert default == pipe(questions, max_seq_len=64, handle_impossible_answer=True)
    assert "" in [answer["answer"] for answer in default]
    labelled, unlabelled = tmp_path / "dev.jsonl", tmp_path / "test.jsonl"
    labelled.write_text("".join(json.dumps(row) + "\n" for row in rows))
    unlabelled.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "answers"}) + "\n" for row in rows))

    def answers(data: Path, *flags: str) -> dict[str, str]:
        out = evaluate.main(["--model", str(folder), "--dataset", str(data), "--predictions", *flags, "--output_dir",
                             str(tmp_path / f"eval-{data.stem}-{len(flags)}")])
        return json.loads((out / "predictions.json").read_text())

    alone = answers(unlabelled)
    assert "no answer where [CLS] scores higher (the run's, saved in config.json)" in capsys.readouterr().out
    assert alone == answers(labelled) and "" in alone.values()
    every = answers(unlabelled, "--version_2_with_negative", "false")
    assert "" not in every.values() and every == answers(labelled, "--version_2_with_negative", "false")


def test_a_runs_no_answer_threshold_is_saved_and_the_pipeline_and_lineage_evaluate_answer_by_it(tmp_path):
    """BERT's tau (section 4.3), run_qa.py's null_score_diff_threshold: the run scores its validation questions by it,
    with the official script's best_exact and best_f1 over thresholds in results.json and the card, and saves it
    beside handle_impossible_answer; the saved pipeline and `lineage evaluate` answer by it (their arguments win), and
    evaluated at best_f1_thresh the validation questions score best_f1."""
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "qa", "--task", "question-answering",
                           "--dataset", "embedded:qa", "--max_steps", "3", "--save_steps", "0", "--train_size", "60",
                           "--eval_size", "20", "--max_query_length", "32", "--null_score_diff_threshold", "1000")
    assert json.loads((folder / "config.json").read_text())["task_specific_params"] == {"question-answering": {
        "max_question_len": 32, "handle_impossible_answer": True, "null_score_diff_threshold": 1000.0}}
    assert results["eval_best_f1"] >= results["eval_f1"] and results["eval_best_exact"] >= results["eval_exact_match"]
    assert f"| eval_best_f1_thresh | {results['eval_best_f1_thresh']:.4f} |" in (folder / "README.md").read_text()
    questions = [{"question": row["question"], "context": row["context"]}
                 for row in generate_records("qa", "test", size=20)]
    pipe = transformers.pipeline("question-answering", model=str(folder), trust_remote_code=True)
    assert "" not in [answer["answer"] for answer in pipe(questions, max_seq_len=64)]
    assert "" in [answer["answer"] for answer in pipe(questions, max_seq_len=64, null_score_diff_threshold=0)]
    common = ["--model", str(folder), "--dataset", "embedded:qa", "--split", "validation", "--eval_size", "20"]
    out = evaluate.main([*common, "--output_dir", str(tmp_path / "eval")])
    figures = json.loads((out / "results.json").read_text())["scores"]["question-answering"]
    for key in ("exact_match", "f1", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"):
        assert figures[key] == results[f"eval_{key}"]
    out = evaluate.main([*common, "--version_2_with_negative", "false", "--output_dir", str(tmp_path / "every")])
    every = json.loads((out / "results.json").read_text())["scores"]["question-answering"]
    assert (every["exact_match"], every["f1"]) == (figures["exact_match"], figures["f1"])  # 1000: none empty
    out = evaluate.main([*common, f"--null_score_diff_threshold={results['eval_best_f1_thresh']!r}", "--output_dir",
                         str(tmp_path / "best")])
    figures = json.loads((out / "results.json").read_text())["scores"]["question-answering"]
    assert figures["f1"] == pytest.approx(results["eval_best_f1"], abs=1e-12) and figures["no_answer_exact_match"] > 0


def test_a_run_on_answerable_questions_saves_that_every_question_is_answered(tmp_path, capsys):
    """The no-answer rule is the training questions': trained on answerable questions alone, the model never learnt
    to score [CLS] above a span, so the run saves handle_impossible_answer false even where its validation data has
    unanswerable ones (and is scored so, results.json's no_answer_* figures); its pipeline answers as one without
    the rule, and `lineage evaluate` answers every question of data without answers. A stream, not read ahead, takes
    its validation questions' rule."""
    rows = generate_records("qa", "train", size=60)
    train, validation, test = tmp_path / "train.jsonl", tmp_path / "dev.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows[20:] if row["answers"]["text"]))
    validation.write_text("".join(json.dumps(row) + "\n" for row in rows[:20]))
    test.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "answers"}) + "\n" for row in rows[:20]))
    results, folder = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "qa", "--task", "question-answering",
                           "--train_file", str(train), "--validation_file", str(validation), "--max_steps", "3",
                           "--save_steps", "0", "--max_query_length", "32")
    assert "eval_no_answer_exact_match" in results
    assert json.loads((folder / "config.json").read_text())["task_specific_params"] == {
        "question-answering": {"max_question_len": 32, "handle_impossible_answer": False}}
    pipe = transformers.pipeline("question-answering", model=str(folder), trust_remote_code=True)
    questions = [{"question": row["question"], "context": row["context"]} for row in rows[:20]]
    assert pipe(questions, max_seq_len=64) == pipe(questions, max_seq_len=64, handle_impossible_answer=False)
    out = evaluate.main(["--model", str(folder), "--dataset", str(test), "--predictions", "--output_dir",
                         str(tmp_path / "eval")])
    assert "every question answered (the run's, saved in config.json)" in capsys.readouterr().out
    assert "" not in json.loads((out / "predictions.json").read_text()).values()
    _, streamed = _run(finetune.main, "bert-finetune-nli-tiny", tmp_path / "stream", "--task", "question-answering",
                       "--train_file", str(train), "--validation_file", str(validation), "--streaming", "true",
                       "--max_steps", "2", "--save_steps", "0", "--max_query_length", "32")
    assert json.loads((streamed / "config.json").read_text())["task_specific_params"]["question-answering"][
        "handle_impossible_answer"] is True


class FakeHub:
    """Stands in for `huggingface_hub.HfApi`: records calls and what the uploaded folder held."""

    calls: list[tuple] = []
    fail = False

    def create_repo(self, repo_id, exist_ok=False):
        if self.fail:
            raise OSError("no token")
        self.calls.append(("create_repo", repo_id, exist_ok))

    def upload_folder(self, repo_id, folder_path):
        self.calls.append(("upload_folder", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))


def test_push_to_hub_uploads_the_final_folder(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.setattr(FakeHub, "calls", [])
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # as online, with a token: the fake Hub
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    _, folder = _run(pretrain_gpt.main, "gpt-pretrain-tiny", tmp_path / "a", "--max_steps", "2", "--save_steps", "0",
                     "--push_to_hub", "someone/tiny-gpt")
    assert FakeHub.calls[0] == ("create_repo", "someone/tiny-gpt", True)
    assert FakeHub.calls[1][:2] == ("upload_folder", "someone/tiny-gpt")
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json"} <= set(FakeHub.calls[1][2])

    monkeypatch.setattr(FakeHub, "fail", True)
    with pytest.raises(RuntimeError, match="push_to_hub: uploading to 'someone/tiny-gpt' failed .*model is saved in"):
        _run(pretrain_gpt.main, "gpt-pretrain-tiny", tmp_path / "b", "--max_steps", "2", "--save_steps", "0",
             "--push_to_hub", "someone/tiny-gpt")
    assert (tmp_path / "b" / "model" / "model.safetensors").is_file()


def test_every_command_finishes_the_same_way(runs):
    """One finish step: results.json and the card name the data the loader read (`Recipe.data_source`), the card
    where the weights started, and the samples of the commands that make them are in both."""
    data = {"bert": "embedded:documents", "bert-nli": "embedded:nli", "gpt": "embedded:documents",
            "gpt-nli": "embedded:nli", "mt": "embedded:translation"}
    for name, source in data.items():
        results, folder = runs[name]
        assert json.loads((folder / "results.json").read_text())["dataset"] == source
        assert read_card_metadata(folder / "README.md")["datasets"] == [source]
        assert "Started from " in (folder / "README.md").read_text()
    for name in ("gpt", "mt"):
        results, folder = runs[name]
        card, saved = (folder / "README.md").read_text(), json.loads((folder / "results.json").read_text())
        assert "## Samples" in card and saved["sample_0"] == results["sample_0"]
    assert " -> " in runs["mt"][0]["sample_0"]
