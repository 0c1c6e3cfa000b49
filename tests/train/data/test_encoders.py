"""Example builders: NSP statistics and pair structure, BERT's truncation, packing exactness, label alignment,
QA offsets and windows."""

import random
from types import SimpleNamespace

import pytest

from train.data.collators import PaddingCollator
from train.data.corpus import generate_records, tokenizer_training_texts
from train.data.encoders import (
    IGNORE_INDEX,
    LabelAlignmentError,
    QAAnswerSpanError,
    create_nsp_examples,
    cut_questions,
    encode_qa,
    encode_token_classification,
    pack_documents,
    pack_sequences,
    questions_cut,
    truncate_ranges,
)
from train.data.tokenization import train_tokenizer


@pytest.fixture(scope="module")
def bert():
    return train_tokenizer("bert", tokenizer_training_texts(size=600), 1200)


# ----------------------------------------------------------------------------- NSP

def _synthetic_documents(count: int, rng: random.Random):
    """Token id = doc * 10_000 + position, so every token tells its document and order."""
    docs = []
    for d in range(count):
        position, sentences = 0, []
        for _ in range(rng.randint(2, 12)):
            length = rng.randint(3, 25)
            sentences.append([d * 10_000 + 100 + position + i for i in range(length)])
            position += length
        docs.append(sentences)
    return docs


def test_nsp_is_fifty_fifty_and_pairs_are_real(bert):
    tokenizer = SimpleNamespace(cls_token_id=2, sep_token_id=3)
    docs = _synthetic_documents(1500, random.Random(0))
    examples = create_nsp_examples(docs, tokenizer, max_length=64, seed=0, dupe_factor=2)
    assert len(examples) > 5000
    rate = sum(e["next_sentence_label"] for e in examples) / len(examples)
    assert abs(rate - 0.5) < 0.02
    for e in examples:
        ids, types = e["input_ids"], e["token_type_ids"]
        assert len(ids) <= 64 and ids[0] == 2 and ids[-1] == 3 and len(types) == len(ids)
        split = ids.index(3)
        a, b = ids[1:split], ids[split + 1:-1]
        assert types == [0] * (split + 1) + [1] * (len(b) + 1) and a and b
        doc_a, doc_b = {t // 10_000 for t in a}, {t // 10_000 for t in b}
        assert len(doc_a) == 1 and len(doc_b) == 1
        if e["next_sentence_label"] == 0:
            assert doc_a == doc_b and max(a) < min(b), "IsNext: B must follow A in the same document"
        else:
            assert doc_a != doc_b, "NotNext: B must come from another document"


def test_truncate_ranges_trims_longer_side_from_both_ends():
    rng, fronts, backs = random.Random(0), 0, 0
    for _ in range(50):
        a, b = [0, 30], [100, 110]
        truncate_ranges(a, b, 25, rng)
        assert (a[1] - a[0]) + (b[1] - b[0]) == 25 and b == [100, 110]
        fronts += a[0] != 0
        backs += a[1] != 30
    assert fronts and backs


# ----------------------------------------------------------------------------- causal LM

def test_packing_keeps_every_token_once():
    """Each document's tokens once, followed by the separator; a document of no tokens (a blank line) adds none."""
    rng = random.Random(0)
    docs = [[rng.randint(10, 999) for _ in range(rng.randint(0, 300))] for _ in range(400)]
    assert [] in docs
    stream = [t for d in docs if d for t in (*d, 7)]
    for block_size in (1, 16, 128, 1000):
        blocks = list(pack_sequences(docs, block_size, separator_id=7))
        assert all(len(b) == block_size for b in blocks)
        flat = [t for b in blocks for t in b]
        assert flat == stream[:len(flat)] and len(stream) - len(flat) < block_size
        kept = list(pack_sequences(docs, block_size, separator_id=7, drop_last=False))
        assert [t for b in kept for t in b] == stream


def test_packed_documents_restart_their_positions_at_each_document_and_block():
    """`pack_documents`: the blocks of `pack_sequences`, full; positions count up within each document (its
    separator included) and restart at 0 at each document's first token and at each block's first token."""
    rng = random.Random(1)
    docs = [[rng.randint(10, 999) for _ in range(rng.randint(0, 90))] for _ in range(200)]
    docs[3:3] = [[], []]  # blank lines
    starts = [i == 0 for d in docs if d for i in range(len(d) + 1)]  # each document's first token; none empty
    for block_size in (1, 16, 128):
        for drop_last in (True, False):
            blocks = list(pack_documents(docs, block_size, 7, drop_last))
            assert [b["input_ids"] for b in blocks] == list(pack_sequences(docs, block_size, 7, drop_last))
            assert all(len(b["input_ids"]) == block_size for b in blocks[:-1 if not drop_last else None])
            flat_starts = starts[:sum(len(b["input_ids"]) for b in blocks)]
            offset = 0
            for block in blocks:
                positions = block["position_ids"]
                assert len(positions) == len(block["input_ids"]) and max(positions) < block_size
                for i, position in enumerate(positions):
                    expected = 0 if i == 0 or flat_starts[offset + i] else positions[i - 1] + 1
                    assert position == expected
                offset += len(positions)
    # 11 12 7 | 13 7 | 14 15 16 7, cut into blocks of 4: the second block opens with the end of [13], at 0
    blocks = list(pack_documents([[11, 12], [13], [14, 15, 16]], 4, 7))
    assert [b["input_ids"] for b in blocks] == [[11, 12, 7, 13], [7, 14, 15, 16]]
    assert [b["position_ids"] for b in blocks] == [[0, 1, 2, 0], [0, 0, 1, 2]]


# ----------------------------------------------------------------------------- token classification

def test_labels_on_first_subtoken(bert):
    words = [["Anna", "Strombergsson", "visited", "Kuala", "Lumpurian", "."]]
    tags = [[1, 2, 0, 3, 4, 0]]
    out = encode_token_classification({"tokens": words, "ner_tags": tags}, bert)
    tokens = bert.convert_ids_to_tokens(out["input_ids"][0])
    labels = out["labels"][0]
    assert labels[0] == labels[-1] == IGNORE_INDEX  # [CLS], [SEP]
    assert any(t.startswith("##") for t in tokens), "want a word split into sub-tokens"
    for token, label in zip(tokens[1:-1], labels[1:-1]):
        assert (label == IGNORE_INDEX) == token.startswith("##")
    assert [x for x in labels if x != IGNORE_INDEX] == tags[0]
    batch = PaddingCollator(bert)([{k: v[0] for k, v in out.items()},
                                   {"input_ids": [2, 3], "token_type_ids": [0, 0], "attention_mask": [1, 1],
                                    "labels": [IGNORE_INDEX, IGNORE_INDEX]}])
    assert (batch["labels"][1] == IGNORE_INDEX).all()


def test_label_alignment_error_names_row(bert):
    with pytest.raises(LabelAlignmentError, match="row 11: 2 words"):
        encode_token_classification({"tokens": [["a", "b"]], "ner_tags": [[0]]}, bert, indices=[11])


# ----------------------------------------------------------------------------- QA

def test_qa_offsets_map_answers_to_tokens(bert):
    rows = generate_records("qa", "train", size=60)
    examples = {k: [r[k] for r in rows] for k in rows[0]}
    out = encode_qa(examples, bert, max_length=384)
    assert len(out["input_ids"]) == len(rows)  # every context fits one window
    answered = 0
    for i, row in enumerate(rows):
        start, end = out["start_positions"][i], out["end_positions"][i]
        if row["answers"]["text"]:
            answered += 1
            span = bert.decode(out["input_ids"][i][start:end + 1])
            assert span == row["answers"]["text"][0].lower()
            assert bert.convert_ids_to_tokens(out["input_ids"][i])[start] != "[CLS]"
        else:
            assert start == end == 0
    assert 0 < answered < len(rows)


def test_qa_doc_stride_windows(bert):
    filler = " ".join(f"Sentence number {i} says nothing." for i in range(60))
    context = filler + " The treasure is buried in Lisbon. " + filler
    start = context.index("Lisbon")
    examples = {"id": ["x"], "question": ["Where is the treasure?"], "context": [context],
                "answers": [{"text": ["Lisbon"], "answer_start": [start]}]}
    out = encode_qa(examples, bert, max_length=96, doc_stride=32, keep_offsets=True)
    windows = len(out["input_ids"])
    assert windows > 5 and out["example_id"] == [0] * windows
    hits = [i for i in range(windows) if out["start_positions"][i] != 0]
    assert hits and len(hits) < windows  # found where the window holds it, [CLS] elsewhere
    for i in hits:
        s, e = out["start_positions"][i], out["end_positions"][i]
        assert bert.decode(out["input_ids"][i][s:e + 1]) == "lisbon"
        assert out["offset_mapping"][i][s][0] == start
    assert all(len(ids) <= 96 for ids in out["input_ids"])
    assert out["offset_mapping"][0][0] is None  # [CLS] and question tokens carry no context offsets


def test_qa_answer_outside_context_is_an_error(bert):
    examples = {"id": ["q7"], "question": ["Where?"], "context": ["Anna lives in Oslo."],
                "answers": [{"text": ["Oslo"], "answer_start": [40]}]}
    with pytest.raises(QAAnswerSpanError, match=r"row 7 \(id 'q7'\).*outside its context of 19 characters$"):
        encode_qa(examples, bert, indices=[7])


def test_an_unanswerable_question_written_as_an_empty_answer_at_minus_one_is_told_the_squad_2_form(bert):
    """Some tools write SQuAD 2.0's unanswerable questions as {'text': [''], 'answer_start': [-1]}."""
    examples = {"question": ["Where?"], "context": ["Anna lives in Oslo."],
                "answers": [{"text": [""], "answer_start": [-1]}]}
    with pytest.raises(QAAnswerSpanError, match=r"a question without an answer \(SQuAD 2.0\) has empty lists: "
                                                r"\{'text': \[\], 'answer_start': \[\]\}"):
        encode_qa(examples, bert)


def _long_questions(rows: list[dict]) -> dict:
    """The rows as a batch, each question lengthened past 100 tokens (with SQuAD's stray leading spaces)."""
    examples = {k: [r[k] for r in rows] for k in rows[0]}
    examples["question"] = ["  " + q.rstrip("?") + ", " + ", ".join(f"given detail {i} of {t}" for i in range(25)) + "?"
                            for q, t in zip(examples["question"], examples["title"])]
    return examples


def test_a_question_past_max_query_length_is_cut_to_its_first_tokens_and_the_answers_keep_their_text(bert):
    """A question of 100+ tokens in windows of 64 (stride 16) panicked in the tokenizer; cut to its first 20 tokens
    (BERT's run_squad.py), every window holds those 20 tokens exactly, and over several questions and contexts the
    context offsets stay the context's own: each answer span reads the gold answer text in its context."""
    rows = generate_records("qa", "validation", size=12)
    examples = _long_questions(rows)
    assert min(len(bert(q, add_special_tokens=False)["input_ids"]) for q in examples["question"]) > 100
    out = encode_qa(examples, bert, max_length=64, doc_stride=16, max_query_length=20, keep_offsets=True)
    found = set()
    for i, (ids, example, offsets) in enumerate(zip(out["input_ids"], out["example_id"], out["offset_mapping"])):
        question = bert(examples["question"][example].lstrip(), add_special_tokens=False)["input_ids"]
        assert len(ids) <= 64 and ids[1:21] == question[:20] and ids[21] == bert.sep_token_id
        context, answers = examples["context"][example], examples["answers"][example]
        own = [tuple(o) for o in bert(context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
        spans = [tuple(o) for o in offsets if o is not None]
        first = own.index(spans[0])
        assert spans == own[first:first + len(spans)]  # a run of the context's own token offsets
        start, end = out["start_positions"][i], out["end_positions"][i]
        if start:
            assert context[offsets[start][0]:offsets[end][1]] == answers["text"][0]
            found.add(example)
    assert found == {e for e, row in enumerate(rows) if row["answers"]["text"]}


def test_questions_within_max_query_length_are_encoded_as_they_were(bert):
    rows = generate_records("qa", "validation", size=12)
    examples = {k: [r[k] for r in rows] for k in rows[0]}
    longest = max(len(bert(q, add_special_tokens=False)["input_ids"]) for q in examples["question"])
    whole = encode_qa(examples, bert, max_length=96, doc_stride=24, max_query_length=10_000, keep_offsets=True)
    assert encode_qa(examples, bert, max_length=96, doc_stride=24, max_query_length=longest, keep_offsets=True) == whole


def test_the_questions_counted_as_cut_are_those_cut_questions_cuts(bert):
    """A question of exactly max_query_length tokens, or one longer only by its leading spaces, is not cut."""
    rows = generate_records("qa", "validation", size=6)
    questions = _long_questions(rows)["question"][:3] + ["   " + row["question"] for row in rows[3:]]
    longest = max(len(bert(q.lstrip(), add_special_tokens=False)["input_ids"]) for q in questions[3:])
    kept = [q.lstrip() for q in questions]
    for limit in (longest, 3):
        changed = sum(cut != whole for cut, whole in zip(cut_questions(questions, bert, limit), kept))
        assert questions_cut(questions, bert, limit) == changed == (3 if limit == longest else 6)
