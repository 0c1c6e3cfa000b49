"""transformers pipelines on a saved tiny BERT with a WordPiece tokenizer trained in the test: fill-mask,
text-classification (single and pair), token-classification, zero-shot-classification and feature-extraction,
each checked against a direct forward pass of the same model."""

import pytest
import torch
import transformers
from conftest import preset
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TEXTS = [
    "the cat sat on the mat", "a dog ran in the park", "the weather is good today", "the food was not good",
    "paris is the capital of france", "berlin is a city in germany", "she reads a book every evening",
    "two plus two is four", "the river flows to the sea", "he plays the piano well",
]
NLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}


def wordpiece_tokenizer() -> transformers.PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(TEXTS * 3, trainers.WordPieceTrainer(vocab_size=200, special_tokens=SPECIALS))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64, model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


@pytest.fixture(scope="module")
def tokenizer():
    return wordpiece_tokenizer()


def saved(tmp_path, tokenizer, model_class_name: str, **config_fields):
    from modeling import modeling_lineage_bert

    config = preset("bert-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **config_fields)
    model = getattr(modeling_lineage_bert, model_class_name)(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return model


def test_tokenizer_pair_template_gives_segments(tokenizer):
    encoded = tokenizer("the cat", "a dog")
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    first = tokens.index("[SEP]") + 1
    assert encoded["token_type_ids"] == [0] * first + [1] * (len(tokens) - first)


def test_fill_mask(tmp_path, tokenizer):
    model = saved(tmp_path, tokenizer, "LineageBertForMaskedLM")
    fill = transformers.pipeline("fill-mask", model=str(tmp_path), top_k=3)
    results = fill("the cat sat on the [MASK]")
    assert len(results) == 3 and all("[MASK]" not in r["sequence"] for r in results)
    encoded = tokenizer("the cat sat on the [MASK]", return_tensors="pt")
    position = encoded["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    probs = model(**encoded).logits[0, position].softmax(-1)
    top = probs.topk(3)
    assert [r["token"] for r in results] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([r["score"] for r in results]), top.values, atol=1e-5, rtol=1e-4)


def test_fill_mask_never_offers_a_padding_row(tmp_path, tokenizer):
    """`pad_vocab_to_multiple_of`: rows past the tokenizer's vocabulary, made to win every softmax, never show."""
    model = saved(tmp_path, tokenizer, "LineageBertForMaskedLM", pad_vocab_to_multiple_of=64)
    vocab = len(tokenizer)
    assert model.lm_head.decoder.bias.shape[0] > vocab
    with torch.no_grad():
        model.lm_head.decoder.bias[vocab:] = 1e4
    model.save_pretrained(tmp_path)
    results = transformers.pipeline("fill-mask", model=str(tmp_path), top_k=5)("the cat sat on the [MASK]")
    assert len(results) == 5 and all(0 <= r["token"] < vocab for r in results)
    assert sum(r["score"] for r in results) < 1.0  # the real vocabulary's softmax, not one padding row's 1.0


def test_text_classification_single_and_pair(tmp_path, tokenizer):
    model = saved(tmp_path, tokenizer, "LineageBertForSequenceClassification", id2label=NLI_LABELS,
                  label2id={v: k for k, v in NLI_LABELS.items()})
    classify = transformers.pipeline("text-classification", model=str(tmp_path), top_k=None)
    for text in ("the food was not good", {"text": "paris is in france", "text_pair": "paris is a city"}):
        results = classify(text)
        results = results[0] if isinstance(results[0], list) else results  # a str input comes back batched
        scores = {r["label"]: r["score"] for r in results}
        encoded = (tokenizer(text["text"], text["text_pair"], return_tensors="pt") if isinstance(text, dict)
                   else tokenizer(text, return_tensors="pt"))
        probs = model(**encoded).logits[0].softmax(-1)
        expected = {NLI_LABELS[i]: p for i, p in enumerate(probs.tolist())}
        assert scores.keys() == expected.keys()
        for label in expected:
            assert scores[label] == pytest.approx(expected[label], abs=1e-5)


def test_token_classification(tmp_path, tokenizer):
    labels = {0: "O", 1: "B-LOC", 2: "I-LOC"}
    model = saved(tmp_path, tokenizer, "LineageBertForTokenClassification", id2label=labels,
                  label2id={v: k for k, v in labels.items()})
    tag = transformers.pipeline("token-classification", model=str(tmp_path), aggregation_strategy="none",
                                ignore_labels=[])
    results = tag("paris is the capital of france")
    encoded = tokenizer("paris is the capital of france", return_tensors="pt")
    predicted = model(**encoded).logits[0].argmax(-1).tolist()[1:-1]  # without [CLS] and [SEP]
    assert [r["entity"] for r in results] == [labels[i] for i in predicted]
    assert [r["word"] for r in results] == tokenizer.convert_ids_to_tokens(encoded["input_ids"][0].tolist()[1:-1])


def test_zero_shot_classification_through_the_entailment_label(tmp_path, tokenizer):
    model = saved(tmp_path, tokenizer, "LineageBertForSequenceClassification", id2label=NLI_LABELS,
                  label2id={v: k for k, v in NLI_LABELS.items()})
    zero_shot = transformers.pipeline("zero-shot-classification", model=str(tmp_path))
    result = zero_shot("the weather is good today", candidate_labels=["weather", "food"],
                       hypothesis_template="this is about {}")
    assert sorted(result["labels"]) == ["food", "weather"]
    assert sum(result["scores"]) == pytest.approx(1.0, abs=1e-5)
    entailment = []
    for label in ("weather", "food"):
        encoded = tokenizer("the weather is good today", f"this is about {label}", return_tensors="pt")
        logits = model(**encoded).logits[0]
        entailment.append(logits[0])
    expected = dict(zip(("weather", "food"), torch.stack(entailment).softmax(-1).tolist()))
    for label, score in zip(result["labels"], result["scores"]):
        assert score == pytest.approx(expected[label], abs=1e-5)


def test_feature_extraction(tmp_path, tokenizer):
    model = saved(tmp_path, tokenizer, "LineageBertModel")
    extract = transformers.pipeline("feature-extraction", model=str(tmp_path), return_tensors=True)
    features = extract("the river flows to the sea")
    encoded = tokenizer("the river flows to the sea", return_tensors="pt")
    torch.testing.assert_close(features, model(**encoded).last_hidden_state, atol=1e-5, rtol=1e-5)
