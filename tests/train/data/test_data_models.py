"""End to end: embedded corpus -> trained tokenizer -> datasets map -> collator -> the tiny model of each
family; checks shapes, finite losses, that one batch can be fitted (labels line up with inputs) and that the
transformers pipelines work with these tokenizers."""

import datasets
import pytest
import torch
from transformers import pipeline

import modeling
from train.data.collators import (
    CausalLMCollator,
    MaskedLMCollator,
    PaddingCollator,
    Seq2SeqCollator,
)
from train.data.corpus import NER_LABELS, NLI_LABELS, tokenizer_training_texts
from train.data.files import load_text_dataset
from train.data.model_inputs import (
    prepare_causal_lm_dataset,
    prepare_nsp_dataset,
    tokenize_dataset,
)
from train.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer

datasets.disable_progress_bars()
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
        "max_position_embeddings": 128}


def tiny_config(config_name: str, tokenizer, kind: str, **overrides):
    config_cls = getattr(modeling, config_name)
    return config_cls(**TINY, **config_kwargs_from_tokenizer(tokenizer, kind), **overrides)


@pytest.fixture(scope="module")
def texts():
    return tokenizer_training_texts(size=400)


@pytest.fixture(scope="module")
def bert(texts):
    return train_tokenizer("bert", texts, 600, model_max_length=128)


@pytest.fixture(scope="module")
def gpt(texts):
    return train_tokenizer("gpt", texts, 600, model_max_length=128)


@pytest.fixture(scope="module")
def s2s(texts):
    return train_tokenizer("seq2seq", texts, 500, model_max_length=128)


def first(dataset, n=8):
    return [dataset[i] for i in range(n)]


def fits_one_batch(model, batch, steps=40) -> tuple[float, float]:
    """Loss before and after a few Adam steps on one batch; dropout off."""
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = model(**batch).loss
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses[0], losses[-1]


# ----------------------------------------------------------------------------- BERT

def test_bert_pretraining_mlm_nsp(bert):
    model_cls = modeling.LineageBertForPreTraining
    docs = load_text_dataset("embedded:documents", size=40)
    pairs = prepare_nsp_dataset(docs, bert, max_length=64)
    batch = MaskedLMCollator(bert, pad_to_multiple_of=8, seed=0)(first(pairs))
    model = model_cls(tiny_config("LineageBertConfig", bert, "bert"))
    out = model(**batch, return_logits=True)  # a training forward with labels skips them otherwise (test_lm_loss.py)
    B, T = batch["input_ids"].shape
    assert out.prediction_logits.shape == (B, T, len(bert)) and out.seq_relationship_logits.shape == (B, 2)
    assert torch.isfinite(out.loss) and out.loss.item() > 0
    before, after = fits_one_batch(model, batch)
    assert after < 0.5 * before


def test_bert_classification_token_classification_qa(bert):
    config = tiny_config("LineageBertConfig", bert, "bert", num_labels=3)
    nli = tokenize_dataset(load_text_dataset("embedded:nli", columns=("premise", "hypothesis", "label"), size=8),
                           bert, "classification", text_column="premise", text_pair_column="hypothesis")
    batch = PaddingCollator(bert)(first(nli))
    out = modeling.LineageBertForSequenceClassification(config)(**batch)
    assert out.logits.shape == (8, len(NLI_LABELS)) and torch.isfinite(out.loss)

    ner = tokenize_dataset(load_text_dataset("embedded:ner", columns=("tokens", "ner_tags"), size=8), bert,
                           "token_classification")
    batch = PaddingCollator(bert, pad_to_multiple_of=8)(first(ner))
    config = tiny_config("LineageBertConfig", bert, "bert", num_labels=len(NER_LABELS))
    out = modeling.LineageBertForTokenClassification(config)(**batch)
    assert out.logits.shape == (*batch["input_ids"].shape, len(NER_LABELS)) and torch.isfinite(out.loss)

    qa = tokenize_dataset(load_text_dataset("embedded:qa", columns=("context", "question", "answers"), size=8),
                          bert, "qa", max_length=128, doc_stride=32)
    batch = PaddingCollator(bert)(first(qa))
    out = modeling.LineageBertForQuestionAnswering(tiny_config("LineageBertConfig", bert, "bert"))(**batch)
    assert out.start_logits.shape == batch["input_ids"].shape and torch.isfinite(out.loss)


def test_bert_fill_mask_pipeline(bert):
    model = modeling.LineageBertForMaskedLM(tiny_config("LineageBertConfig", bert, "bert")).eval()
    predictions = pipeline("fill-mask", model=model, tokenizer=bert)("anna lives in [MASK].")
    assert len(predictions) == 5
    for p in predictions:
        assert "[MASK]" not in p["sequence"] and 0 <= p["score"] <= 1 and p["token_str"] == bert.decode([p["token"]])


# ----------------------------------------------------------------------------- GPT

def test_gpt_causal_lm_on_packed_blocks(gpt):
    model_cls = modeling.LineageGptForCausalLM
    blocks = prepare_causal_lm_dataset(load_text_dataset("embedded:documents", size=30), gpt, block_size=64)
    batch = CausalLMCollator(gpt)(first(blocks, 4))
    assert batch["input_ids"].shape == (4, 64) and (batch["input_ids"] != gpt.pad_token_id).all()
    model = model_cls(tiny_config("LineageGptConfig", gpt, "gpt"))
    out = model(**batch, return_logits=True)
    assert out.logits.shape == (4, 64, len(gpt)) and torch.isfinite(out.loss)
    before, after = fits_one_batch(model, batch)
    assert after < 0.5 * before


def test_gpt_classification_template_and_generation(gpt):
    config = tiny_config("LineageGptConfig", gpt, "gpt", num_labels=3)
    nli = tokenize_dataset(load_text_dataset("embedded:nli", columns=("premise", "hypothesis", "label"), size=8),
                           gpt, "classification", text_column="premise", text_pair_column="hypothesis")
    batch = PaddingCollator(gpt)(first(nli))
    model = modeling.LineageGptForSequenceClassification(config)
    out = model(**batch)
    assert out.logits.shape == (8, 3) and torch.isfinite(out.loss)
    lm = modeling.LineageGptForCausalLM(tiny_config("LineageGptConfig", gpt, "gpt")).eval()
    generator = pipeline("text-generation", model=lm, tokenizer=gpt)
    result = generator("Anna was born in", add_special_tokens=False, max_new_tokens=5, do_sample=False)
    assert result[0]["generated_text"].startswith("Anna was born in")


# ----------------------------------------------------------------------------- seq2seq

@pytest.mark.parametrize("family", ["Transformer"])
def test_seq2seq_translation_batch(s2s, family):
    model_cls = getattr(modeling, f"Lineage{family}ForConditionalGeneration")
    pairs = tokenize_dataset(load_text_dataset("embedded:translation", columns=("source", "target"), size=8),
                             s2s, "seq2seq", max_source_length=64, max_target_length=64)
    batch = Seq2SeqCollator(s2s, pad_to_multiple_of=8)(first(pairs))
    model = model_cls(tiny_config(f"Lineage{family}Config", s2s, "seq2seq"))
    out = model(**batch, return_logits=True)
    assert out.logits.shape == (*batch["labels"].shape, len(s2s)) and torch.isfinite(out.loss)
    before, after = fits_one_batch(model, batch)
    assert after < 0.5 * before
    model.eval()
    generated = model.generate(input_ids=batch["input_ids"][:2], attention_mask=batch["attention_mask"][:2],
                               max_new_tokens=6, do_sample=False)
    assert (generated[:, 0] == s2s.bos_token_id).all()
