"""GPT through transformers pipelines: `text-generation` and `text-classification` (single texts and pairs) from a
saved tiny model and a byte-level BPE tokenizer built here with `tokenizers`, whose post-processor adds the GPT
templates `[START] A [EXTRACT]` and `[START] A [DELIM] B [EXTRACT]`."""

import pytest
import torch
from conftest import preset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, pipeline

from modeling import LineageGptForCausalLM, LineageGptForSequenceClassification

SPECIALS = ["[PAD]", "[START]", "[DELIM]", "[EXTRACT]", "<|endoftext|>"]  # ids 0-4, as in gpt-tiny
CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the bird sang a song", "it was a good day",
          "that film was bad", "the movie was great fun"]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def gpt_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(CORPUS * 10, trainers.BpeTrainer(vocab_size=99, special_tokens=SPECIALS,
                                                                    show_progress=False))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIALS}
    assert list(ids.values()) == [0, 1, 2, 3, 4] and tokenizer.get_vocab_size() <= 99
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[START] $A [EXTRACT]",
        pair="[START] $A [DELIM] $B [EXTRACT]",
        special_tokens=[(token, ids[token]) for token in ("[START]", "[DELIM]", "[EXTRACT]")],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", bos_token="[START]", eos_token="<|endoftext|>",
        model_input_names=["input_ids", "attention_mask"], padding_side="left",
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    tokenizer = gpt_tokenizer()
    saved = {}
    for name, model in (
        ("lm", LineageGptForCausalLM(preset("gpt-tiny", eos_token_id=None))),
        ("cls", LineageGptForSequenceClassification(
            preset("gpt-tiny", num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}))),
    ):
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        saved[name] = str(folder)
    return saved


def test_tokenizer_adds_the_gpt_templates(folders):
    tokenizer = AutoTokenizer.from_pretrained(folders["cls"])
    single = tokenizer("the cat sat")["input_ids"]
    pair = tokenizer("the cat sat", "a dog ran")["input_ids"]
    assert single[0] == 1 and single[-1] == 3 and 2 not in single
    assert pair[0] == 1 and pair[-1] == 3 and pair.count(2) == 1
    assert tokenizer.decode(single, skip_special_tokens=True) == "the cat sat"


def test_text_generation_pipeline_matches_generate(folders):
    generator = pipeline("text-generation", model=folders["lm"])
    tokenizer, model = generator.tokenizer, generator.model
    prompts = ["the cat sat", "a dog ran in the park"]
    # the tokenizer's default template ends in [EXTRACT], which is for classification: prompts go in bare
    outputs = generator(prompts, max_new_tokens=8, do_sample=False, batch_size=2, add_special_tokens=False)
    for prompt, output in zip(prompts, outputs):
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        new = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:]
        assert output[0]["generated_text"] == prompt + tokenizer.decode(new, skip_special_tokens=True)


def test_text_generation_never_emits_a_padding_row(tmp_path):
    """`pad_vocab_to_multiple_of`: rows past the vocabulary, made to win every argmax and draw, are never generated."""
    model = LineageGptForCausalLM(preset("gpt-tiny", eos_token_id=None, pad_vocab_to_multiple_of=64))
    with torch.no_grad():
        model.lm_head.weight[99:] = 100.0
    model.save_pretrained(tmp_path)
    tokenizer = gpt_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    generator = pipeline("text-generation", model=str(tmp_path))
    for options in ({"do_sample": False}, {"do_sample": True, "top_k": 0}):
        output = generator("the cat sat", max_new_tokens=8, add_special_tokens=False, return_tensors=True, **options)
        ids = output[0]["generated_token_ids"]
        assert len(ids) > 8 and max(ids) < 99


def test_text_classification_pipeline_single_and_pair(folders):
    classifier = pipeline("text-classification", model=folders["cls"], top_k=None)
    tokenizer, model = classifier.tokenizer, classifier.model
    inputs = ["the film was great fun", {"text": "the cat sat on the mat", "text_pair": "a cat sat"}]
    batched = classifier(inputs, batch_size=2)  # padded batch of one single text and one pair
    for item, result in zip(inputs, batched):
        encoded = tokenizer(**(item if isinstance(item, dict) else {"text": item}), return_tensors="pt")
        assert encoded["input_ids"][0, -1] == 3  # classified at [EXTRACT]
        with torch.no_grad():
            probabilities = model(**encoded).logits.softmax(-1)[0]
        scores = {entry["label"]: entry["score"] for entry in result}
        assert set(scores) == set(LABELS.values())
        for index, label in LABELS.items():
            assert scores[label] == pytest.approx(probabilities[index].item(), abs=1e-5)
