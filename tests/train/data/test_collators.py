"""Collators: dynamic padding, BERT masking statistics on >= 100k tokens and per-example seeding, causal-LM labels,
seq2seq labels (which the model shifts into its decoder inputs), and the sequences every batch carries
(`packed_sequences`, found on the CPU; their use by the models: test_packing.py, test_unpadding.py)."""

import pytest
import torch

from modeling import (
    LineageTransformerConfig,
    LineageTransformerForConditionalGeneration,
)
from modeling.modeling_lineage_transformer import shift_tokens_right
from train.data.collators import (
    IGNORE_INDEX,
    CausalLMCollator,
    MaskedLMCollator,
    PaddingCollator,
    Seq2SeqCollator,
    pad_sequences,
)
from train.data.corpus import generate_records, tokenizer_training_texts
from train.data.encoders import encode_classification, encode_seq2seq
from train.data.tokenization import (
    MissingSpecialTokenError,
    config_kwargs_from_tokenizer,
    train_tokenizer,
)


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


@pytest.mark.parametrize("side", ("right", "left"))
def test_padded_batches_carry_their_rows_real_tokens(bert, mlm_features, side):
    """`packed_sequences` of a padded batch: each row's real tokens (lengths, where they lie among the B * T, whether
    any token is padding), as the model would find them from the mask; multiple choice rows flattened as the heads
    flatten them."""
    batch = MaskedLMCollator(bert, padding_side=side, pad_to_multiple_of=8, seed=0)(mlm_features[:5])
    sequences, mask = batch["packed_sequences"], batch["attention_mask"]
    assert sequences.lengths == [len(f["input_ids"]) for f in mlm_features[:5]] == mask.sum(-1).tolist()
    assert torch.equal(sequences.tokens, mask.flatten().nonzero().squeeze(1)) and sequences.grid == mask.numel()
    assert sequences.padding
    full = PaddingCollator(bert)([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9, 10]}])["packed_sequences"]
    assert not full.padding and full.lengths == [3, 3]
    choices = [bert(["Anna lives in", "Anna lives in"], ["Oslo.", "the big old city of Lima."])] * 3
    batch = PaddingCollator(bert)([{"input_ids": c["input_ids"], "labels": 1} for c in choices])
    assert batch["packed_sequences"].grid == batch["input_ids"].numel()  # (3 x 2 choices) rows
    assert batch["packed_sequences"].lengths == batch["attention_mask"].flatten(0, 1).sum(-1).tolist()


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


def test_mlm_masks_depend_on_the_example_seed_alone(bert, mlm_features):
    """With one seed per example, an example's mask is the same whatever shares its batch and however it is padded."""
    features, seeds = mlm_features[:6], [11, 12, 13, 14, 15, 16]
    for padding_side, multiple in (("right", None), ("left", 8)):
        collator = MaskedLMCollator(bert, padding_side=padding_side, pad_to_multiple_of=multiple)
        together = collator(features, seeds=seeds)
        for i, (feature, seed) in enumerate(zip(features, seeds)):
            alone = collator([feature], seeds=[seed])
            n = len(feature["input_ids"])
            span = slice(0, n) if padding_side == "right" else slice(together["input_ids"].shape[1] - n, None)
            last = slice(0, n) if padding_side == "right" else slice(alone["input_ids"].shape[1] - n, None)
            assert together["input_ids"][i, span].tolist() == alone["input_ids"][0, last].tolist()
            assert together["labels"][i, span].tolist() == alone["labels"][0, last].tolist()
            assert (together["labels"][i] != IGNORE_INDEX).sum() == max(1, round(0.15 * (n - 2)))
    different = MaskedLMCollator(bert)(features, seeds=[seed + 100 for seed in seeds])
    assert not torch.equal(different["labels"], MaskedLMCollator(bert)(features, seeds=seeds)["labels"])
    with pytest.raises(ValueError, match="one seed per example"):
        MaskedLMCollator(bert)(features, seeds=seeds[:2])


def test_causal_lm_collator_labels(gpt):
    batch = CausalLMCollator(gpt)([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert "cu_seq_lens_q" not in batch  # padded rows: boundaries of packed rows only


def test_causal_lm_collator_on_packed_blocks(gpt):
    """Blocks with `position_ids` (packed documents): no attention_mask, padding at position 0 (each pad token a
    sequence of its own), labels -100 at every position 0: no document's first token is predicted from the end of
    the previous one."""
    features = [{"input_ids": [5, 6, 7, 8, 9], "position_ids": [0, 1, 2, 0, 1]},
                {"input_ids": [10, 11, 12], "position_ids": [0, 0, 1]}]
    batch = CausalLMCollator(gpt)(features)
    assert "attention_mask" not in batch
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1], [0, 0, 1, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE_INDEX, 6, 7, IGNORE_INDEX, 9],
                                        [IGNORE_INDEX, IGNORE_INDEX, 12, IGNORE_INDEX, IGNORE_INDEX]]
    # the documents' boundaries over the flattened 10 tokens, as transformers' flattening collator gives them
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5, 6, 8, 9, 10] and batch["cu_seq_lens_q"].dtype == torch.int32
    assert batch["cu_seq_lens_k"].tolist() == batch["cu_seq_lens_q"].tolist()
    assert batch["max_length_q"] == batch["max_length_k"] == 3
    assert batch["packed_sequences"].lengths == [3, 2, 1, 2, 1, 1] and not batch["packed_sequences"].padding


# ----------------------------------------------------------------------------- seq2seq

def test_seq2seq_collator_pads_labels_and_the_model_shifts_them(s2s):
    encoded = encode_seq2seq({"source": ["seventy-two", "I have three hundred five cats."],
                              "target": ["zweiundsiebzig", "Ich habe dreihundertfünf Katzen."]}, s2s)
    features = [{k: v[i] for k, v in encoded.items()} for i in range(2)]
    assert all(f["input_ids"][-1] == s2s.eos_token_id == f["labels"][-1] for f in features)
    batch = Seq2SeqCollator(s2s, pad_to_multiple_of=8)(features)
    assert set(batch) == {"input_ids", "attention_mask", "labels", "packed_sequences"}  # decoder inputs: the model's
    labels = batch["labels"]
    config = LineageTransformerConfig(**config_kwargs_from_tokenizer(s2s, "seq2seq"), hidden_size=8,
                                      num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    decoder = LineageTransformerForConditionalGeneration(config).prepare_decoder_input_ids_from_labels(labels)
    assert labels.shape[1] % 8 == 0 and decoder.shape == labels.shape
    assert (decoder[:, 0] == s2s.bos_token_id).all()
    for i, f in enumerate(features):
        n = len(f["labels"])
        assert labels[i, :n].tolist() == f["labels"] and (labels[i, n:] == IGNORE_INDEX).all()
        assert decoder[i, 1:n + 1].tolist() == f["labels"] and (decoder[i, n + 1:] == s2s.pad_token_id).all()
    assert s2s.decode(features[1]["labels"], skip_special_tokens=True) == "Ich habe dreihundertfünf Katzen."
    with pytest.raises(ValueError, match="padded on the right"):
        Seq2SeqCollator(s2s, padding_side="left")


def test_shift_tokens_right():
    labels = torch.tensor([[5, 6, 2, -100]])
    assert shift_tokens_right(labels, 0, 1).tolist() == [[1, 5, 6, 2]]
