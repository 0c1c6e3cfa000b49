"""Question answering is scored per question as SQuAD's official scripts score it: the metric's normalization, exact
match and F1 (v2.0's unanswerable questions against the empty answer); each window's best span (`answer_spans`); a
question's answer taken from the best of its windows as text of its context, or no answer where [CLS] wins on data
with unanswerable questions, whatever the number of windows a context is cut into."""

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from train import finetune
from train.data.corpus import generate_records, tokenizer_training_texts
from train.data.model_inputs import tokenize_dataset
from train.data.tokenization import train_tokenizer
from train.metrics import load_metric
from train.metrics.squad import normalize, token_f1

SQUAD = load_metric("squad")


def test_normalization_and_token_f1_are_the_official_scripts():
    assert normalize("The  Eiffel-Tower, in Paris!") == "eiffeltower in paris"
    assert normalize("an apple a day") == "apple day"
    assert token_f1("in Paris France", "Paris") == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0 and token_f1("the", "a") == 1.0


def test_exact_match_and_f1_take_the_best_gold_answer_and_score_unanswerable_questions_by_the_empty_answer():
    scores = SQUAD.compute(predictions=["Denver Broncos", "in 1998", "", "Paris"],
                           references=[["Denver Broncos", "Broncos"], ["1998"], [], []])
    assert scores["exact_match"] == pytest.approx(2 / 4)  # hit; "in 1998" misses; empty right; "Paris" wrong
    assert scores["f1"] == pytest.approx((1 + 2 / 3 + 1 + 0) / 4)
    # v2.0's breakdown, as its official script's HasAns_* and NoAns_*; none where every question has an answer (v1.1)
    assert (scores["has_answer_exact_match"], scores["has_answer_f1"]) == pytest.approx((1 / 2, (1 + 2 / 3) / 2))
    assert (scores["no_answer_exact_match"], scores["no_answer_f1"]) == (1 / 2, 1 / 2)
    assert SQUAD.compute(predictions=["Broncos", "1998"], references=[["Denver Broncos"], ["1998", "in 1998"]]) == {
        "exact_match": 1 / 2, "f1": pytest.approx((2 / 3 + 1) / 2)}
    with pytest.raises(ValueError, match="predictions and references are empty"):
        SQUAD.compute(predictions=[], references=[])


def test_each_windows_best_span_lies_in_its_context_and_is_at_most_the_longest_answer():
    ids = torch.tensor([[1, 5, 2, 7, 8, 9, 2, 0]])  # [CLS] q [SEP] context... [SEP] pad
    batch = {"attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]]),
             "token_type_ids": torch.tensor([[0, 0, 0, 1, 1, 1, 1, 0]]), "input_ids": ids}
    start = torch.tensor([[9.0, 8.0, 0.0, 1.0, 3.0, 0.0, 7.0, 9.0]])  # the best starts lie outside the context
    end = torch.tensor([[9.0, 0.0, 0.0, 0.0, 0.0, 2.0, 9.0, 9.0]])
    spans = finetune.answer_spans(start, end, batch)
    assert (spans["start"].item(), spans["end"].item()) == (4, 5)  # in the context, end >= start, no [SEP]
    assert spans["score"].item() == 5.0 and spans["null"].item() == 18.0


@pytest.fixture(scope="module")
def qa_windows():
    """The embedded QA rows (answerable and not) cut into several windows each (windows of 48 tokens)."""
    tokenizer = train_tokenizer("bert", tokenizer_training_texts(size=300), 400, model_max_length=128)
    rows = generate_records("qa", "validation", size=12)
    import datasets

    data = datasets.Dataset.from_list(rows)
    encoded = tokenize_dataset(data, tokenizer, "qa", max_length=48, doc_stride=8, keep_offsets=True)
    return data, encoded


def _logits(encoded, where) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end logits, 10 at the tokens `where(window)` names (a start and an end), 0 elsewhere."""
    width = max(len(ids) for ids in encoded["input_ids"])
    start, end = torch.zeros(len(encoded), width), torch.zeros(len(encoded), width)
    for row, window in enumerate(encoded):
        first, last = where(window)
        start[row, first], end[row, last] = 10.0, 10.0
    return start, end


def _scores(encoded, data, where) -> dict:
    start, end = _logits(encoded, where)
    width = start.shape[1]
    pad = lambda values: [v + [0] * (width - len(v)) for v in values]  # noqa: E731
    batch = {"attention_mask": torch.tensor(pad(encoded["attention_mask"])),
             "token_type_ids": torch.tensor(pad(encoded["token_type_ids"]))}
    spans = finetune.answer_spans(start, end, batch)
    stripped, metrics, _ = finetune.answer_metrics(encoded, data)
    assert "offset_mapping" not in stripped.column_names and len(stripped) == len(encoded)
    return metrics(spans, 0.0)


def test_the_gold_span_of_each_windowed_question_scores_one_and_cls_scores_its_unanswerable_questions(qa_windows):
    data, encoded = qa_windows
    assert len(encoded) > 2 * len(data)  # several windows a question
    assert any(not a["text"] for a in data["answers"]) and any(a["text"] for a in data["answers"])
    gold = _scores(encoded, data, lambda w: (w["start_positions"], w["end_positions"]))  # 0, 0 where it is absent
    assert {k: v for k, v in gold.items() if not k.endswith("_thresh")} == {
        "exact_match": 1.0, "f1": 1.0, "has_answer_exact_match": 1.0, "has_answer_f1": 1.0,
        "no_answer_exact_match": 1.0, "no_answer_f1": 1.0, "best_exact": 1.0, "best_f1": 1.0}


def test_a_window_without_the_answer_that_predicts_nothing_does_not_count_as_a_hit(qa_windows):
    """The old window score counted every window where [CLS] was both label and prediction as exact: here every
    window predicts [CLS], so only the unanswerable questions are right."""
    data, encoded = qa_windows
    unanswerable = sum(not a["text"] for a in data["answers"]) / len(data)
    scores = _scores(encoded, data, lambda w: (0, 0))
    assert scores["exact_match"] == pytest.approx(unanswerable) and scores["f1"] == pytest.approx(unanswerable)


def test_the_best_figures_are_the_official_scripts_sweep_of_the_no_answer_threshold():
    """evaluate-v2.0.py with a na-prob file: each question answered where its score (null minus best span) is at most
    the threshold, else given the empty answer; the best over thresholds, its lowest threshold (below every score:
    all empty); questions of one score switch together. Fractions, thresholds in the scores' units."""
    predictions, references = ["Paris", "Lyon", "Rome", "Metz"], [["Paris"], [], ["Nice"], []]
    scores = SQUAD.compute(predictions=predictions, references=references, no_answer_scores=[-2.0, 1.0, 0.5, 3.0])
    assert scores["exact_match"] == 3 / 4  # at 0: Paris answered; Rome, Lyon and Metz empty
    assert (scores["best_exact"], scores["best_exact_thresh"], scores["best_f1_thresh"]) == (3 / 4, -2.0, -2.0)
    assert SQUAD.compute(predictions=predictions, references=references, no_answer_scores=[-2.0, 1.0, 0.5, 3.0],
                         null_score_diff_threshold=1.0)["exact_match"] == 2 / 4  # Lyon answered, wrongly
    tied = SQUAD.compute(predictions=["Paris", "Lyon"], references=[["Paris"], []], no_answer_scores=[1.0, 1.0])
    assert (tied["best_exact"], tied["best_exact_thresh"]) == (1 / 2, math.nextafter(1.0, -math.inf))  # all empty
    assert "best_f1" not in SQUAD.compute(predictions=["Paris"], references=[["Paris"]], no_answer_scores=[1.0])
    assert math.isnan(SQUAD.compute(predictions=["a", "b"], references=[["a"], []],
                                    no_answer_scores=[math.nan, 0.0])["best_f1"])
    with pytest.raises(ValueError, match="null_score_diff_threshold must be a number, got nan"):
        SQUAD.compute(predictions=["a"], references=[[]], no_answer_scores=[0.0], null_score_diff_threshold=math.nan)


WORDS = ["Paris", "Lyon", "the Nice", "Nice beach", "a", ""]


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS[:-1] + [None]), st.integers(-3, 3)),
                min_size=1, max_size=8), st.integers(-8, 8))
def test_the_best_figures_are_the_best_over_every_threshold_and_the_rule_at_theirs_gives_them(questions, quarter):
    """best_f1 (best_exact) >= f1 (exact_match) at any threshold, no lower threshold reaches it, and the rule run at
    best_f1_thresh gives best_f1."""
    predictions = [prediction for prediction, _, _ in questions]
    references = [[gold] if gold else [] for _, gold, _ in questions]
    differences = [difference / 2 for _, _, difference in questions]
    assume(not all(references))

    def at(threshold: float) -> dict:
        return SQUAD.compute(predictions=predictions, references=references, no_answer_scores=differences,
                             null_score_diff_threshold=threshold)

    best = at(quarter / 4)
    for name, figure in (("f1", "f1"), ("exact", "exact_match")):
        assert best[figure] <= best[f"best_{name}"] + 1e-12
        assert at(best[f"best_{name}_thresh"])[figure] == pytest.approx(best[f"best_{name}"], abs=1e-12)
        chosen = best[f"best_{name}_thresh"]  # the rules of lower thresholds (all empty: below every score) are worse
        lower = [d for d in differences if d < chosen] + ([min(differences) - 1] if chosen >= min(differences) else [])
        assert all(at(t)[figure] < best[f"best_{name}"] - 1e-12 for t in lower)


def _layout(windows: list[int]) -> tuple:
    """Questions of `windows[q]` windows each, `[CLS] q [SEP] c c c [SEP]`, each window three more characters of
    "abcdefghij" than the last: the encoded data, rows and batch that `answer_metrics` and `answer_spans` read."""
    import datasets

    ids, offsets = [], []
    for question, count in enumerate(windows):
        for window in range(count):
            ids.append(question)
            offsets.append([None] * 3 + [[3 * window + k, 3 * window + k + 1] for k in range(3)] + [None])
    data = datasets.Dataset.from_dict({"example_id": ids, "offset_mapping": offsets})
    rows = {"context": ["abcdefghij"] * len(windows), "answers": [{"text": [], "answer_start": []}] * len(windows)}
    batch = {"attention_mask": torch.ones(len(ids), 7, dtype=torch.long),
             "token_type_ids": torch.tensor([[0, 0, 0, 1, 1, 1, 1]] * len(ids))}
    return data, rows, batch


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(st.lists(st.integers(1, 2), min_size=1, max_size=4), st.data())
def test_a_question_gets_no_answer_exactly_where_its_null_score_exceeds_its_best_span_by_more_than_the_threshold(
        windows, draw):
    """run_qa.py's null_score_diff_threshold t, on logits set by hand: the empty answer iff the lowest [CLS] score
    (start + end logit) of a question's windows minus the best span score of all of them is above t, else that span;
    t very large: no empty answer; very negative: all empty."""
    data, rows, batch = _layout(windows)
    halves = st.lists(st.integers(-6, 6), min_size=7, max_size=7)
    start, end = (torch.tensor([draw.draw(halves) for _ in range(len(data))], dtype=torch.float32) / 2
                  for _ in range(2))
    threshold = draw.draw(st.integers(-26, 26)) / 4  # on and between the differences, which are halves
    spans = finetune.answer_spans(start, end, batch)
    owners = data["example_id"]
    for question in range(len(windows)):
        mine = [w for w, owner in enumerate(owners) if owner == question]
        null = min(start[w, 0].item() + end[w, 0].item() for w in mine)
        scored = [(start[w, i].item() + end[w, j].item(), 3 * (w - mine[0]) + i - 3, 3 * (w - mine[0]) + j - 2)
                  for w in mine for i in range(3, 6) for j in range(i, 6)]
        best = max(score for score, _, _ in scored)
        for t, expected in ((threshold, null - best > threshold), (1e9, False), (-1e9, True)):
            answer = finetune.answer_metrics(data, rows, unanswerable=True, threshold=t)[2](spans)[question]
            assert (answer == "") == expected
            assert expected or answer in {"abcdefghij"[a:b] for score, a, b in scored if score == best}
    assert "" not in finetune.answer_metrics(data, rows, unanswerable=False, threshold=-1e9)[2](spans)


def test_the_rule_at_the_best_threshold_scores_the_best_figures_and_at_zero_as_before(qa_windows):
    """On random logits over windowed questions: the figures at threshold 0 are those of the answers given (as before
    the threshold), best_f1 is at least f1, and running the rule at best_f1_thresh gives best_f1."""
    data, encoded = qa_windows
    torch.manual_seed(0)
    start, end = _logits(encoded, lambda w: (0, 0))
    start, end = start + 4 * torch.randn_like(start), end + 4 * torch.randn_like(end)
    width = start.shape[1]
    pad = lambda values: [v + [0] * (width - len(v)) for v in values]  # noqa: E731
    spans = finetune.answer_spans(start, end, {"attention_mask": torch.tensor(pad(encoded["attention_mask"])),
                                               "token_type_ids": torch.tensor(pad(encoded["token_type_ids"]))})
    _, metrics, answered = finetune.answer_metrics(encoded, data)
    figures = metrics(spans, 0.0)
    given = SQUAD.compute(predictions=answered(spans), references=[a["text"] for a in data["answers"]])
    assert {k: figures[k] for k in given} == given
    assert figures["best_f1"] >= figures["f1"] and figures["best_exact"] >= figures["exact_match"]
    for name, figure in (("f1", "f1"), ("exact", "exact_match")):
        _, rescored, _ = finetune.answer_metrics(encoded, data, threshold=figures[f"best_{name}_thresh"])
        assert rescored(spans, 0.0)[figure] == pytest.approx(figures[f"best_{name}"], abs=1e-12)
