"""Collators and example builders: BERT masking and NSP statistics on >= 100k tokens, packing exactness,
seq2seq shifting, label alignment, QA offsets, dynamic padding."""

import random
from types import SimpleNamespace

import pytest
import torch

from train.core.collators import (
    IGNORE_INDEX, CausalLMCollator, LabelAlignmentError, MaskedLMCollator, PaddingCollator, QAAnswerSpanError,
    Seq2SeqCollator, create_nsp_examples, encode_classification, encode_qa, encode_seq2seq,
    encode_token_classification, pack_sequences, pad_sequences, truncate_seq_pair,
)
from modeling.modeling_lineage_transformer import shift_tokens_right
from train.core.corpus import generate_records, tokenizer_training_texts
from train.core.tokenization import MissingSpecialTokenError, train_tokenizer



@pytest.fixture(scope="module")
def texts():
    return tokenizer_training_texts(size=600)


@pytest.fixture(scope="module")
def bert(texts):
    return train_tokenizer("bert", texts, 1200)


@pytest.fixture(scope="module")
def gpt(texts):
    return train_tokenizer("gpt", texts, 1200)


@pytest.fixture(scope="module")
def s2s(texts):
    return train_tokenizer("seq2seq", texts, 800)


@pytest.fixture(scope="module")
def mlm_features(bert):
    """>= 100k non-special tokens of real documents, as ragged [CLS] ... [SEP] features."""
    docs = [r["text"] for r in generate_records("documents", "train", seed=1, size=1500)]
    ids = bert(docs, truncation=True, max_length=128)["input_ids"]
    assert sum(len(x) - 2 for x in ids) >= 100_000
    return [{"input_ids": x} for x in ids]


# ----------------------------------------------------------------------------- padding

def test_pad_sequences_right_left_and_multiple_of_8():
    right = pad_sequences([[1, 2, 3], [4]], value=0, multiple_of=8)
    assert right.shape == (2, 8) and right[0, :3].tolist() == [1, 2, 3] and right[1].tolist() == [4] + [0] * 7
    left = pad_sequences([[1, 2, 3], [4]], value=-1, side="left")
    assert left.tolist() == [[1, 2, 3], [-1, -1, 4]]
    assert pad_sequences([[1] * 8], 0, multiple_of=8).shape == (1, 8)


def test_padding_collator_classification_pairs(bert):
    examples = {"premise": ["Anna lives in Oslo.", "Ben is a very old teacher who lives in Lima."],
                "hypothesis": ["Anna lives in Lima.", "Ben is a teacher."], "label": [2, 0]}
    encoded = encode_classification(examples, bert, "premise", "hypothesis", "label")
    features = [{k: v[i] for k, v in encoded.items()} for i in range(2)]
    batch = PaddingCollator(bert, pad_to_multiple_of=8)(features)
    n0, n1 = (len(f["input_ids"]) for f in features)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] >= max(n0, n1)
    assert batch["labels"].tolist() == [2, 0]
    assert batch["attention_mask"].sum(1).tolist() == [n0, n1]
    assert (batch["input_ids"][batch["attention_mask"] == 0] == bert.pad_token_id).all()
    assert (batch["token_type_ids"][batch["attention_mask"] == 0] == 0).all()
    sep_positions = (batch["input_ids"][0] == bert.sep_token_id).nonzero().squeeze(1).tolist()
    assert batch["token_type_ids"][0, : sep_positions[0] + 1].eq(0).all()
    assert batch["token_type_ids"][0, sep_positions[0] + 1: sep_positions[1] + 1].eq(1).all()


def test_padding_collator_gpt_template_ends_in_extract(gpt):
    encoded = encode_classification({"text": ["good", "The film was not good at all."], "label": [1, 0]}, gpt)
    batch = PaddingCollator(gpt)([{k: v[i] for k, v in encoded.items()} for i in range(2)])
    last = batch["attention_mask"].sum(1) - 1  # right padding: the last real token
    extract = gpt.convert_tokens_to_ids("[EXTRACT]")
    assert batch["input_ids"][torch.arange(2), last].tolist() == [extract, extract]
    assert batch["input_ids"][:, 0].tolist() == [gpt.convert_tokens_to_ids("[START]")] * 2


def test_padding_collator_multiple_choice_and_unknown_column(bert):
    choices = [bert(["Anna lives in", "Anna lives in"], ["Oslo.", "the big old city of Lima."])] * 3
    features = [{"input_ids": c["input_ids"], "token_type_ids": c["token_type_ids"], "labels": 1} for c in choices]
    batch = PaddingCollator(bert)(features)
    assert batch["input_ids"].shape[:2] == (3, 2) and batch["attention_mask"].shape == batch["input_ids"].shape
    assert batch["labels"].shape == (3,)
    with pytest.raises(ValueError, match="'text'"):
        PaddingCollator(bert)([{"input_ids": [1, 2], "text": [3]}])


# ----------------------------------------------------------------------------- masked LM

def test_mlm_statistics_on_100k_tokens(bert, mlm_features):
    collator = MaskedLMCollator(bert, seed=0)
    selected = masked = randomized = kept = candidates = 0
    special = torch.tensor(sorted(bert.all_special_ids))
    for start in range(0, len(mlm_features), 64):
        features = mlm_features[start:start + 64]
        batch = collator(features)
        original = PaddingCollator(bert)(features)["input_ids"]
        chosen = batch["labels"] != IGNORE_INDEX
        is_candidate = ~torch.isin(original, special)
        assert not (chosen & ~is_candidate).any(), "a special or padding token was selected"
        assert torch.equal(batch["labels"][chosen], original[chosen])
        assert torch.equal(batch["input_ids"][~chosen], original[~chosen]), "unselected tokens changed"
        new = batch["input_ids"][chosen]
        is_mask = new == bert.mask_token_id
        is_same = new == original[chosen]
        assert not torch.isin(new[~is_mask], special).any(), "random replacement drew a special token"
        candidates += int(is_candidate.sum())
        selected += int(chosen.sum())
        masked += int(is_mask.sum())
        kept += int(is_same.sum())
        randomized += int((~is_mask & ~is_same).sum())
    assert candidates >= 100_000
    assert abs(selected / candidates - 0.15) < 0.005
    # a random draw equal to the original token counts as "kept": expected 10% * (1 + 1/|V|)
    assert abs(masked / selected - 0.8) < 0.01
    assert abs(kept / selected - 0.1) < 0.01
    assert abs(randomized / selected - 0.1) < 0.01


def test_mlm_exact_budget_per_sequence(bert):
    ids = bert(["anna lives in oslo and works as a teacher at orion labs near the harbour"])["input_ids"][0]
    collator = MaskedLMCollator(bert, seed=3)
    for _ in range(20):
        labels = collator([{"input_ids": ids}])["labels"]
        assert int((labels != IGNORE_INDEX).sum()) == max(1, round(0.15 * (len(ids) - 2)))


def test_whole_word_masking_selects_whole_words(bert, mlm_features):
    collator = MaskedLMCollator(bert, whole_word_mask=True, seed=0)
    batch = collator(mlm_features[:200])
    original = PaddingCollator(bert)(mlm_features[:200])["input_ids"]
    chosen = batch["labels"] != IGNORE_INDEX
    tokens = [bert.convert_ids_to_tokens(row) for row in original.tolist()]
    continuation = torch.tensor([[t.startswith("##") for t in row] for row in tokens])
    assert continuation.any(), "the corpus should split some words into pieces"
    # a continuation is chosen exactly when the token before it is
    inner = continuation[:, 1:]
    assert torch.equal(chosen[:, 1:][inner], chosen[:, :-1][inner])
    candidates = int((original > 4).sum())
    assert 0.13 < int(chosen.sum()) / candidates <= 0.15


def test_mlm_rejects_tokenizer_without_mask(gpt):
    with pytest.raises(MissingSpecialTokenError, match="mask_token"):
        MaskedLMCollator(gpt)


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


def test_truncate_seq_pair_trims_longer_side_from_both_ends():
    rng, fronts, backs = random.Random(0), 0, 0
    for _ in range(50):
        a, b = list(range(30)), list(range(100, 110))
        truncate_seq_pair(a, b, 25, rng)
        assert len(a) + len(b) == 25 and b == list(range(100, 110))
        fronts += a[0] != 0
        backs += a[-1] != 29
    assert fronts and backs


# ----------------------------------------------------------------------------- causal LM

def test_packing_keeps_every_token_once():
    rng = random.Random(0)
    docs = [[rng.randint(10, 999) for _ in range(rng.randint(0, 300))] for _ in range(400)]
    stream = [t for d in docs for t in (*d, 7)]
    for block_size in (1, 16, 128, 1000):
        blocks = list(pack_sequences(docs, block_size, separator_id=7))
        assert all(len(b) == block_size for b in blocks)
        flat = [t for b in blocks for t in b]
        assert flat == stream[:len(flat)] and len(stream) - len(flat) < block_size
        kept = list(pack_sequences(docs, block_size, separator_id=7, drop_last=False))
        assert [t for b in kept for t in b] == stream


def test_causal_lm_collator_labels(gpt):
    batch = CausalLMCollator(gpt)([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


# ----------------------------------------------------------------------------- seq2seq

def test_seq2seq_collator_shifts_labels(s2s):
    encoded = encode_seq2seq({"source": ["seventy-two", "I have three hundred five cats."],
                              "target": ["zweiundsiebzig", "Ich habe dreihundertfünf Katzen."]}, s2s)
    features = [{k: v[i] for k, v in encoded.items()} for i in range(2)]
    assert all(f["input_ids"][-1] == s2s.eos_token_id == f["labels"][-1] for f in features)
    batch = Seq2SeqCollator(s2s, pad_to_multiple_of=8)(features)
    labels, decoder = batch["labels"], batch["decoder_input_ids"]
    assert labels.shape[1] % 8 == 0 and decoder.shape == labels.shape
    assert (decoder[:, 0] == s2s.bos_token_id).all()
    for i, f in enumerate(features):
        n = len(f["labels"])
        assert labels[i, :n].tolist() == f["labels"] and (labels[i, n:] == IGNORE_INDEX).all()
        assert decoder[i, 1:n + 1].tolist() == f["labels"] and (decoder[i, n + 1:] == s2s.pad_token_id).all()
    assert s2s.decode(features[1]["labels"], skip_special_tokens=True) == "Ich habe dreihundertfünf Katzen."


def test_shift_tokens_right():
    labels = torch.tensor([[5, 6, 2, -100]])
    assert shift_tokens_right(labels, 0, 1).tolist() == [[1, 5, 6, 2]]


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
    with pytest.raises(QAAnswerSpanError, match=r"row 7 \(id 'q7'\).*outside its context of 19 characters"):
        encode_qa(examples, bert, indices=[7])
