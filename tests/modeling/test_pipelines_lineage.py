"""The Lineage translation, text2text-generation and question-answering pipelines (modeling/pipelines_lineage.py):
saved with the model and run from the folder in a clean process, equal to the model called directly; span
selection on a QA model whose logits are set by hand (top_k, max_answer_len, impossible answers, striding)."""

import copy
import json
import math
import re

import pytest
import torch
from conftest import preset, run_clean_process
from transformers.modeling_outputs import QuestionAnsweringModelOutput

from modeling import (
    LineageBertForMaskedLM,
    LineageBertForQuestionAnswering,
    LineageRnnForConditionalGeneration,
    LineageTransformerForConditionalGeneration,
)
from modeling.pipelines_lineage import (
    LineageQuestionAnsweringPipeline,
    LineageTranslationPipeline,
)
from train.data.corpus import tokenizer_training_texts
from train.data.encoders import cut_questions
from train.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from train.setup.splits import qa_doc_stride

SOURCES = ["seventy-two", "one hundred and three", "nine"]
LONG_CONTEXT = " ".join(["Anna lives in Oslo and works as a baker in the old town."] * 8 + ["Tom sings in Lima."])


@pytest.fixture(scope="module")
def tokenizers():
    texts = tokenizer_training_texts(size=300) + [LONG_CONTEXT, "Tom sings in Lima."] * 50
    return (train_tokenizer("seq2seq", texts, 300, model_max_length=64),
            train_tokenizer("bert", texts, 600, model_max_length=64))


@pytest.fixture(scope="module")
def folders(tokenizers, tmp_path_factory):
    """Saved translators (Transformer, RNN) and a saved QA model (random weights), each with its tokenizer."""
    seq2seq_tok, bert_tok = tokenizers
    root = tmp_path_factory.mktemp("pipelines")
    torch.manual_seed(0)
    translator = LineageTransformerForConditionalGeneration(
        preset("transformer-tiny", **config_kwargs_from_tokenizer(seq2seq_tok, "seq2seq"))).eval()
    rnn = LineageRnnForConditionalGeneration(
        preset("rnn-tiny", **config_kwargs_from_tokenizer(seq2seq_tok, "seq2seq"))).eval()
    qa = LineageBertForQuestionAnswering(preset("bert-tiny", **config_kwargs_from_tokenizer(bert_tok, "bert"))).eval()
    models = {"translator": (translator, seq2seq_tok), "rnn": (rnn, seq2seq_tok), "qa": (qa, bert_tok)}
    for name, (model, tok) in models.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return {name: (model, root / name) for name, (model, _) in models.items()}


def test_saved_folders_declare_their_pipelines(folders, tokenizers, tmp_path):
    config = json.loads((folders["translator"][1] / "config.json").read_text())
    assert set(config["custom_pipelines"]) == {"translation", "text2text-generation"}
    assert config["custom_pipelines"]["translation"] == {
        "impl": "pipelines_lineage.LineageTranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    config = json.loads((folders["qa"][1] / "config.json").read_text())
    assert list(config["custom_pipelines"]) == ["question-answering"]
    for folder in (folders["translator"][1], folders["qa"][1]):
        assert (folder / "pipelines_lineage.py").is_file()
    LineageBertForMaskedLM(preset("bert-tiny")).save_pretrained(tmp_path)
    assert "custom_pipelines" not in json.loads((tmp_path / "config.json").read_text())


CLEAN_RUN = """
import copy
import json
from transformers import pipeline
translate = pipeline("translation", model=FOLDERS["translator"], trust_remote_code=True)
generate = pipeline("text2text-generation", model=FOLDERS["translator"], trust_remote_code=True)
qa = pipeline("question-answering", model=FOLDERS["qa"], trust_remote_code=True)
out = {
    "single": translate(SOURCES[0], max_new_tokens=6),
    "batched": translate(SOURCES, batch_size=3, num_beams=3, max_new_tokens=6),
    "returned": translate(SOURCES[0], num_beams=3, num_return_sequences=2, max_new_tokens=6),
    "text2text": generate(SOURCES[1], max_new_tokens=6),
    "qa": qa(question="Where does Tom sing?", context=CONTEXT, top_k=3, max_answer_len=4, doc_stride=16),
    "qa_batched": qa([{"question": "Who sings?", "context": CONTEXT}, {"question": "Who?", "context": "Tom sings."}],
                     batch_size=4, handle_impossible_answer=True),
    "rnn": pipeline("translation", model=FOLDERS["rnn"], trust_remote_code=True)(SOURCES, batch_size=3, num_beams=2,
                                                                                 max_new_tokens=6),
    "classes": [type(p).__name__ for p in (translate, generate, qa)],
}
print(json.dumps(out))
"""


def _generated_texts(model, tokenizer, texts, **generate_kwargs) -> list[str]:
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = model.generate(**batch, pad_token_id=tokenizer.pad_token_id, **generate_kwargs)
    return [tokenizer.decode(row, skip_special_tokens=True) for row in ids]


def test_clean_process_pipelines_equal_direct_calls(folders, tokenizers, tmp_path):
    seq2seq_tok, bert_tok = tokenizers
    names = {name: str(folder) for name, (_, folder) in folders.items()}
    code = f"FOLDERS = {names!r}\nSOURCES = {SOURCES!r}\nCONTEXT = {LONG_CONTEXT!r}\n" + CLEAN_RUN
    got = json.loads(run_clean_process(code, cwd=tmp_path).strip().splitlines()[-1])
    assert got["classes"] == ["LineageTranslationPipeline", "LineageText2TextGenerationPipeline",
                              "LineageQuestionAnsweringPipeline"]
    translator = folders["translator"][0]
    assert got["single"] == [{"translation_text": t} for t in
                             _generated_texts(translator, seq2seq_tok, SOURCES[:1], max_new_tokens=6)]
    assert got["batched"] == [{"translation_text": t} for t in
                              _generated_texts(translator, seq2seq_tok, SOURCES, num_beams=3, max_new_tokens=6)]
    returned = _generated_texts(translator, seq2seq_tok, SOURCES[:1], num_beams=3, num_return_sequences=2,
                                max_new_tokens=6)
    assert got["returned"] == [{"translation_text": t} for t in returned]
    assert got["rnn"] == [{"translation_text": t} for t in
                          _generated_texts(folders["rnn"][0], seq2seq_tok, SOURCES, num_beams=2, max_new_tokens=6)]
    assert got["text2text"] == [{"generated_text": t} for t in
                                _generated_texts(translator, seq2seq_tok, SOURCES[1:2], max_new_tokens=6)]
    local = LineageQuestionAnsweringPipeline(model=folders["qa"][0], tokenizer=bert_tok)
    expected = local(question="Where does Tom sing?", context=LONG_CONTEXT, top_k=3, max_answer_len=4, doc_stride=16)
    assert [a["answer"] for a in got["qa"]] == [a["answer"] for a in expected] and len(expected) == 3
    assert [a["score"] for a in got["qa"]] == pytest.approx([a["score"] for a in expected], rel=1e-5)
    for answer in got["qa"]:
        assert LONG_CONTEXT[answer["start"]:answer["end"]] == answer["answer"]
    one_by_one = [local(**q, handle_impossible_answer=True) for q in (
        {"question": "Who sings?", "context": LONG_CONTEXT}, {"question": "Who?", "context": "Tom sings."})]
    assert [a["answer"] for a in got["qa_batched"]] == [a["answer"] for a in one_by_one]


def test_a_saved_folder_cuts_long_questions_as_its_run_did_and_strides_as_training(folders, tokenizers, tmp_path):
    """A run records its max_query_length as the pipeline's `max_question_len` (`task_specific_params`): a question of
    80 words, with no room in a window of 64 tokens (refused before), is cut to its first tokens as training cuts it;
    windows overlap by a quarter of their length (`doc_stride`), as training's do."""
    model = copy.deepcopy(folders["qa"][0])
    model.config.task_specific_params = {"question-answering": {"max_question_len": 4}}
    model.save_pretrained(tmp_path / "qa")
    tokenizers[1].save_pretrained(tmp_path / "qa")
    question = "Where does Tom sing " + "and why " * 40 + "?"
    code = (f"FOLDER = {str(tmp_path / 'qa')!r}\nQUESTION = {question!r}\nCONTEXT = {LONG_CONTEXT!r}\n"
            "import json\nfrom transformers import pipeline\n"
            "qa = pipeline('question-answering', model=FOLDER, trust_remote_code=True)\n"
            "print(json.dumps(qa(question=QUESTION, context=CONTEXT, top_k=3)))\n")
    got = json.loads(run_clean_process(code, cwd=tmp_path).strip().splitlines()[-1])
    local = LineageQuestionAnsweringPipeline(model=model, tokenizer=tokenizers[1])
    (cut,) = cut_questions([question], tokenizers[1], 4)
    expected = local(question=cut, context=LONG_CONTEXT, top_k=3, max_seq_len=64, doc_stride=qa_doc_stride(64))
    assert [a["answer"] for a in got] == [a["answer"] for a in expected]
    assert [a["score"] for a in got] == pytest.approx([a["score"] for a in expected], rel=1e-5)
    windows = {stride: len(tokenizers[1](cut, LONG_CONTEXT, truncation="only_second", max_length=64, stride=stride,
                                        return_overflowing_tokens=True)["input_ids"]) for stride in (16, 32)}
    assert windows[16] != windows[32]
    assert len(list(local.preprocess({"question": question, "context": LONG_CONTEXT}, max_seq_len=64))) == windows[16]


def test_a_saved_doc_stride_is_the_pipelines_default_and_an_explicit_one_wins(folders, tokenizers):
    """A run with `doc_stride` records it beside `max_question_len`: the pipeline's windows share that many context
    tokens by default (a quarter of the window without it), and `doc_stride=` still wins; a saved stride the question
    leaves no room for is refused naming it as the run's."""
    model = copy.deepcopy(folders["qa"][0])
    question = {"question": "Where does Tom sing?", "context": LONG_CONTEXT}

    def windows(pipe, **kwargs) -> int:
        return len(list(pipe.preprocess(question, max_seq_len=48, **kwargs)))

    def strided(stride: int) -> int:
        return len(tokenizers[1](question["question"], LONG_CONTEXT, truncation="only_second", max_length=48,
                                 stride=stride, return_overflowing_tokens=True)["input_ids"])

    local = LineageQuestionAnsweringPipeline(model=model, tokenizer=tokenizers[1])
    assert local._lengths(48, None, question["question"]) == (48, 12) and windows(local) == strided(12)
    model.config.task_specific_params = {"question-answering": {"max_question_len": 64, "doc_stride": 30}}
    assert local._lengths(48, None, question["question"]) == (48, 30) and windows(local) == strided(30) != strided(12)
    assert local._lengths(48, 5, question["question"]) == (48, 5) and windows(local, doc_stride=5) == strided(5)
    with pytest.raises(ValueError, match=r"`doc_stride` must be below \d+, got 30 \(the run's, saved in the config\)"):
        local(**question, max_seq_len=32)


class ScriptedQA(LineageBertForQuestionAnswering):
    """A QA head whose logits are set by hand: high start logits on the tokens `starts`, high end logits on
    `ends` (by id), optionally a high score on [CLS] (position 0) for the empty answer."""

    def script(self, starts: dict[int, float], ends: dict[int, float], cls: float = -10.0):
        self.starts, self.ends, self.cls = starts, ends, cls
        return self

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        logits = []
        for chosen in (self.starts, self.ends):
            scores = torch.full(input_ids.shape, -10.0)
            for token, value in chosen.items():
                scores[input_ids == token] = value
            scores[:, 0] = self.cls
            logits.append(scores)
        return QuestionAnsweringModelOutput(start_logits=logits[0], end_logits=logits[1])


@pytest.fixture
def scripted(tokenizers):
    bert_tok = tokenizers[1]
    model = ScriptedQA(preset("bert-tiny", **config_kwargs_from_tokenizer(bert_tok, "bert"))).eval()
    ids = {word: bert_tok.convert_tokens_to_ids(word) for word in ("oslo", "lima", "tom", "sings", "in", "baker")}
    assert bert_tok.unk_token_id not in ids.values()
    return model, LineageQuestionAnsweringPipeline(model=model, tokenizer=bert_tok), ids


def test_hand_set_logits_pick_the_span(scripted):
    model, qa, ids = scripted
    model.script({ids["lima"]: 5.0}, {ids["lima"]: 5.0})
    answer = qa(question="Where does Tom sing?", context="Tom sings in Lima.")
    assert answer["answer"] == "Lima" and (answer["start"], answer["end"]) == (13, 17)
    model.script({ids["tom"]: 5.0, ids["in"]: 4.0}, {ids["lima"]: 5.0, ids["sings"]: 3.0})
    answers = qa(question="Who?", context="Tom sings in Lima.", top_k=3)
    assert [a["answer"] for a in answers] == ["Tom sings in Lima", "in Lima", "Tom sings"]
    assert answers[0]["score"] > answers[1]["score"] > answers[2]["score"]
    assert qa(question="Who?", context="Tom sings in Lima.", max_answer_len=2)["answer"] == "in Lima"


def test_impossible_answer_wins_only_when_asked(scripted):
    model, qa, ids = scripted
    model.script({ids["lima"]: 1.0}, {ids["lima"]: 1.0}, cls=6.0)
    assert qa(question="Who?", context="Tom sings in Lima.")["answer"] == "Lima"
    empty = qa(question="Who?", context="Tom sings in Lima.", handle_impossible_answer=True)
    assert empty == {"score": pytest.approx(empty["score"]), "start": 0, "end": 0, "answer": ""}
    assert empty["score"] > 0.5


def test_a_saved_no_answer_rule_is_the_pipelines_default_and_an_explicit_one_wins(scripted):
    """A run on questions without answers saves `handle_impossible_answer`: the empty answer wins where [CLS] scores
    higher without being told, `handle_impossible_answer=False` still answers; saved false, it answers as before."""
    model, qa, ids = scripted
    model.script({ids["lima"]: 1.0}, {ids["lima"]: 1.0}, cls=6.0)
    question = {"question": "Who?", "context": "Tom sings in Lima."}
    told = qa(**question, handle_impossible_answer=True)
    model.config.task_specific_params = {"question-answering": {"handle_impossible_answer": True}}
    assert qa(**question) == told and told["answer"] == ""
    assert qa(**question, handle_impossible_answer=False)["answer"] == "Lima"
    model.config.task_specific_params = {"question-answering": {"handle_impossible_answer": False}}
    assert qa(**question)["answer"] == "Lima"


def test_the_threshold_shifts_the_empty_answers_comparison_a_saved_one_is_the_default_and_an_explicit_one_wins(
        scripted):
    """run_qa.py's null_score_diff_threshold: the empty answer wins where its log score exceeds the best span's by
    more than it; within a window, their logits' difference (here 2 * 6 - 2 * 1 = 10)."""
    model, qa, ids = scripted
    model.script({ids["lima"]: 1.0}, {ids["lima"]: 1.0}, cls=6.0)
    question = {"question": "Who?", "context": "Tom sings in Lima."}
    for threshold, expected in ((-50.0, ""), (0, ""), (9.99, ""), (10.01, "Lima"), (50.0, "Lima")):
        assert qa(**question, handle_impossible_answer=True,
                  null_score_diff_threshold=threshold)["answer"] == expected
    both = qa(**question, handle_impossible_answer=True, null_score_diff_threshold=10.01, top_k=2)
    assert [a["answer"] for a in both] == ["Lima", ""] and both[1]["score"] > both[0]["score"]  # the scores as before
    model.config.task_specific_params = {"question-answering": {"handle_impossible_answer": True,
                                                                "null_score_diff_threshold": 10.01}}
    assert qa(**question)["answer"] == "Lima"
    assert qa(**question, null_score_diff_threshold=9.99)["answer"] == ""
    model.config.task_specific_params["question-answering"]["null_score_diff_threshold"] = 9.99
    assert qa(**question)["answer"] == ""
    for bad in (math.nan, math.inf, "1", True):
        with pytest.raises(ValueError, match=f"^`null_score_diff_threshold` must be a finite number, got "
                                             f"{re.escape(repr(bad))}$"):
            qa(**question, null_score_diff_threshold=bad)
    with pytest.raises(ValueError, match=r"^`null_score_diff_threshold`=1.0 shifts the empty answer's score, which "
                                         r"competes only with handle_impossible_answer=True"):
        qa(**question, handle_impossible_answer=False, null_score_diff_threshold=1.0)
    model.config.task_specific_params = {}
    with pytest.raises(ValueError, match="this model saved no such rule"):
        qa(**question, null_score_diff_threshold=1.0)


def test_long_context_striding_finds_the_answer_in_a_later_window(scripted, tokenizers):
    model, qa, ids = scripted
    model.script({ids["lima"]: 5.0}, {ids["lima"]: 5.0})
    windows = tokenizers[1]("Where?", LONG_CONTEXT, truncation="only_second", max_length=40, stride=8,
                            return_overflowing_tokens=True)["input_ids"]
    assert len(windows) > 3 and ids["lima"] not in windows[0]
    answer = qa(question="Where?", context=LONG_CONTEXT, max_seq_len=40, doc_stride=8)
    assert answer["answer"] == "Lima" and LONG_CONTEXT[answer["start"]:answer["end"]] == "Lima"
    batched = qa([{"question": "Where?", "context": LONG_CONTEXT}] * 3, max_seq_len=40, doc_stride=8, batch_size=5)
    assert batched == [answer] * 3


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", ["translator", "rnn"])
def test_a_batch_translates_as_each_source_alone_on_either_padding_side(folders, tokenizers, name, side):
    """A batch's sources are padded on the tokenizer's padding side, and the encoders number positions from the
    first slot (the RNN packs its rows from it): each translation is the one of its source alone."""
    tokenizer = copy.deepcopy(tokenizers[0])
    tokenizer.padding_side = side
    translate = LineageTranslationPipeline(model=folders[name][0], tokenizer=tokenizer)
    kwargs = dict(num_beams=2, max_new_tokens=6, return_tensors=True)
    batched = translate(SOURCES, batch_size=3, **kwargs)
    for result, source in zip(batched, SOURCES, strict=True):
        assert torch.equal(result["translation_token_ids"], translate(source, **kwargs)[0]["translation_token_ids"])
    assert tokenizer.padding_side == side


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_batch_answers_as_each_question_alone_on_either_padding_side(folders, tokenizers, side):
    """Batched windows are padded on the tokenizer's padding side (a tokenizer that served a text-generation pipeline
    pads on the left): the answers and scores are those of each question asked alone."""
    tokenizer = copy.deepcopy(tokenizers[1])
    tokenizer.padding_side = side
    qa = LineageQuestionAnsweringPipeline(model=folders["qa"][0], tokenizer=tokenizer)
    questions = [{"question": "Where does Tom sing?", "context": "Tom sings in Lima."},
                 {"question": "Who?", "context": LONG_CONTEXT},
                 {"question": "Who sings?", "context": "Tom sings."}]
    kwargs = dict(top_k=2, max_seq_len=40, doc_stride=8)
    alone = [qa(**question, **kwargs) for question in questions]
    batched = qa(questions, batch_size=4, **kwargs)
    assert tokenizer.padding_side == side
    assert [[a["answer"] for a in answers] for answers in batched] == [[a["answer"] for a in x] for x in alone]
    for answers, expected in zip(batched, alone):
        assert [a["score"] for a in answers] == pytest.approx([a["score"] for a in expected], rel=1e-5)


def test_bad_input_is_refused(scripted, folders, tokenizers):
    model, qa, ids = scripted
    with pytest.raises(ValueError, match="needs question= and context="):
        qa(question="Who?")
    with pytest.raises(ValueError, match="`top_k` must be an integer >= 1, got 0"):
        qa(question="Who?", context="Tom sings.", top_k=0)
    with pytest.raises(ValueError, match="`doc_stride` must be below"):
        qa(question="Who?", context="Tom sings.", max_seq_len=16, doc_stride=12)
    with pytest.raises(ValueError, match="got 4 \\(cut the question with a smaller `max_question_len`, or raise "
                                         "`max_seq_len`\\)"):
        qa(question="Where does Tom sing " * 4, context="Tom sings.", max_seq_len=16)
    model.script({ids["tom"]: 5.0}, {ids["sings"]: 5.0})
    assert qa(question="Where does Tom sing " * 4, context="Tom sings.", max_seq_len=16,
              max_question_len=4)["answer"] == "Tom sings"
    with pytest.raises(ValueError, match="`max_seq_len` is 500 but at most 64 tokens can be read"):
        qa(question="Who?", context="Tom sings.", max_seq_len=500)
    with pytest.raises(ValueError, match="needs an encoder-decoder model"):
        LineageTranslationPipeline(model=folders["qa"][0], tokenizer=tokenizers[1])


def test_model_card_shows_the_saved_pipelines(folders, tmp_path):
    from train.run.environment import versions
    from train.run.publish import write_model_card
    from train.run.recipes import Recipe

    recipe = Recipe(output_dir=str(tmp_path / "run"), dataset="embedded:translation")
    card = write_model_card(tmp_path, folders["translator"][0], recipe, {"eval_bleu": 1.0}, versions()).read_text()
    assert 'translation = pipeline("translation", model="path/or/repo-id", trust_remote_code=True)' in card
    assert 'text2text_generation = pipeline("text2text-generation"' in card
    plain = write_model_card(tmp_path, LineageBertForMaskedLM(preset("bert-tiny")), recipe, {},
                             versions()).read_text()
    assert "pipeline(" not in plain


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pipelines_on_a_gpu_match_the_cpu(folders, tokenizers):
    seq2seq_tok, bert_tok = tokenizers
    translator, qa = folders["translator"][0], folders["qa"][0]
    runs = {}
    for device, (mt, reader) in (("cpu", (copy.deepcopy(translator), copy.deepcopy(qa))),
                                 ("cuda", (copy.deepcopy(translator), copy.deepcopy(qa)))):
        translate = LineageTranslationPipeline(model=mt, tokenizer=seq2seq_tok, device=device)
        answer = LineageQuestionAnsweringPipeline(model=reader, tokenizer=bert_tok, device=device)
        runs[device] = (translate(SOURCES, batch_size=3, num_beams=3, max_new_tokens=6),
                        answer(question="Where does Tom sing?", context=LONG_CONTEXT, top_k=2, doc_stride=16,
                               batch_size=4))
    assert runs["cuda"][0] == runs["cpu"][0]
    assert [a["answer"] for a in runs["cuda"][1]] == [a["answer"] for a in runs["cpu"][1]]
    assert [a["score"] for a in runs["cuda"][1]] == pytest.approx([a["score"] for a in runs["cpu"][1]], rel=1e-3)


def test_a_window_past_the_tokenizers_length_names_the_tokenizer_as_the_limit(tokenizers):
    bert_tok = tokenizers[1]  # model_max_length 64
    model = LineageBertForQuestionAnswering(preset("bert-tiny", **{**config_kwargs_from_tokenizer(bert_tok, "bert"),
                                                                   "max_position_embeddings": 128})).eval()
    qa = LineageQuestionAnsweringPipeline(model=model, tokenizer=bert_tok)
    with pytest.raises(ValueError, match=r"`max_seq_len` is 100 but at most 64 tokens can be read \(the tokenizer's "
                                         r"model_max_length 64, the model's max_position_embeddings 128\)"):
        qa(question="Who?", context="Tom sings.", max_seq_len=100)
