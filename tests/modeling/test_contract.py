"""One contract for every head of every family (BERT, GPT, Transformer, RNN): no cache in training mode,
`return_dict=False` tuples, `num_items_in_batch` as a token count, labels and inputs refused by name, the keyword
contract (the cache under either name, no keyword swallowed); then the defects of the review, each with its test.
The registry of heads and their inputs here is also what test_properties.py walks with the properties (padding,
causality, the cache, save/load, gradient checkpointing, parity with the reference)."""

import ast
import inspect
import warnings

import accelerate
import pytest
import torch
import transformers
from accelerate import infer_auto_device_map
from accelerate.utils import compute_module_sizes
from conftest import REPO, preset
from packaging.version import Version
from transformers.utils import ModelOutput

import modeling
from modeling import (
    LineageBertForMaskedLM,
    LineageBertForMultipleChoice,
    LineageBertForNextSentencePrediction,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForSequenceClassification,
    LineageBertForTokenClassification,
    LineageBertLMHeadModel,
    LineageGptForCausalLM,
    LineageGptForMultipleChoice,
    LineageGptForSequenceClassification,
    LineageRnnForConditionalGeneration,
    LineageRnnModel,
    LineageTransformerForConditionalGeneration,
    LineageTransformerModel,
)
from modeling.arguments import (
    CACHE_NAME,
    OLD_CACHE_NAME,
    TRANSFORMERS_KEYWORDS,
    output_cache,
)
from modeling.packing import PackedSequences

V, B, T, CHOICES = 99, 2, 6, 3  # the tiny presets' vocabulary
PRESETS = {"Bert": "bert-tiny", "Gpt": "gpt-tiny", "Transformer": "transformer-tiny", "Rnn": "rnn-tiny"}
# every class the package registers with the Auto classes: a head added to a family joins the contract
HEADS = [getattr(module, name) for _, pretrained, module in modeling._FAMILIES
         for name in dict.fromkeys(pretrained.auto_classes.values())]
# heads with a per-token loss that Trainer's `num_items_in_batch` divides (the others average per example)
TOKEN_LOSS = {LineageBertForMaskedLM, LineageBertLMHeadModel, LineageBertForTokenClassification,
              LineageGptForCausalLM, LineageTransformerForConditionalGeneration, LineageRnnForConditionalGeneration}
SEQ2SEQ = {LineageTransformerModel, LineageTransformerForConditionalGeneration, LineageRnnModel,
           LineageRnnForConditionalGeneration}


def family(model_class) -> str:
    return next(name for name in PRESETS if model_class.__name__.startswith(f"Lineage{name}"))


def build(model_class, **overrides):
    name = family(model_class)
    dropout = {"hidden_dropout_prob": 0.0} if name == "Rnn" else {"hidden_dropout_prob": 0.0,
                                                                  "attention_probs_dropout_prob": 0.0}
    if model_class is LineageBertLMHeadModel:
        overrides = {"is_decoder": True, **overrides}
    return model_class(preset(PRESETS[name], **dropout, **overrides))


def inputs_and_labels(model_class) -> tuple[dict, dict]:
    """The inputs of a head and, apart, its labels (seq2seq: the labels give the decoder inputs too)."""
    ids = torch.randint(5, V, (B, T))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, -2:] = 0
    if model_class in SEQ2SEQ:
        target = torch.randint(5, V, (B, T - 1))
        target[1, -1] = -100
        inputs = {"input_ids": ids, "attention_mask": mask}
        if model_class in (LineageTransformerModel, LineageRnnModel):
            return {**inputs, "decoder_input_ids": target.clamp(min=4)}, {}
        return inputs, {"labels": target}
    if model_class in (LineageBertForMultipleChoice, LineageGptForMultipleChoice):
        inputs = {"input_ids": torch.randint(5, V, (B, CHOICES, T)), "attention_mask": torch.ones(B, CHOICES, T,
                                                                                                  dtype=torch.long)}
        return inputs, {"labels": torch.tensor([0, CHOICES - 1])}
    inputs = {"input_ids": ids, "attention_mask": mask}
    masked = ids.masked_fill(torch.rand(B, T) > 0.4, -100)
    masked[0, 0] = ids[0, 0]
    labels = {
        LineageBertForPreTraining: {"labels": masked, "next_sentence_label": torch.tensor([0, 1])},
        LineageBertForMaskedLM: {"labels": masked},
        LineageBertLMHeadModel: {"labels": ids.masked_fill(mask == 0, -100)},
        LineageGptForCausalLM: {"labels": ids.masked_fill(mask == 0, -100)},
        LineageBertForNextSentencePrediction: {"labels": torch.tensor([1, 0])},
        LineageBertForSequenceClassification: {"labels": torch.tensor([1, 0])},
        LineageGptForSequenceClassification: {"labels": torch.tensor([1, 0])},
        LineageBertForTokenClassification: {"labels": torch.randint(0, 2, (B, T)).masked_fill(mask == 0, -100)},
        LineageBertForQuestionAnswering: {"start_positions": torch.tensor([1, 2]),
                                          "end_positions": torch.tensor([3, 2])},
    }.get(model_class, {})
    return inputs, labels


def unlabelled_inputs(model_class) -> dict:
    """A call without labels (a seq2seq head then needs its decoder inputs)."""
    inputs, labels = inputs_and_labels(model_class)
    if model_class in SEQ2SEQ and "labels" in labels:
        inputs["decoder_input_ids"] = labels["labels"].clamp(min=4)
    return inputs


def tensors(value) -> list[torch.Tensor]:
    """The tensors of an output, in order (caches and nested tuples flattened; other objects left out)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors(item)]
    return []


def scalar(output: ModelOutput) -> torch.Tensor:
    loss = output.get("loss")
    return loss if loss is not None else tensors(output.to_tuple())[0].float().square().mean()


head_ids = pytest.mark.parametrize("model_class", HEADS, ids=lambda c: c.__name__)
GENERATIVE = [LineageBertLMHeadModel, LineageGptForCausalLM, LineageTransformerForConditionalGeneration,
              LineageRnnForConditionalGeneration]
generative_ids = pytest.mark.parametrize("model_class", GENERATIVE, ids=lambda c: c.__name__)


@pytest.mark.parametrize("config_class, pretrained, module", modeling._FAMILIES,
                         ids=[config_class.model_type for config_class, _, _ in modeling._FAMILIES])
def test_every_auto_class_builds_its_head_from_the_family_config(config_class, pretrained, module):
    assert type(transformers.AutoConfig.for_model(config_class.model_type)) is config_class
    config = preset(PRESETS[family(pretrained)])
    for auto_name, class_name in pretrained.auto_classes.items():
        assert type(getattr(transformers, auto_name).from_config(config)) is getattr(module, class_name), auto_name


@head_ids
def test_no_cache_in_training_mode(model_class):
    model = build(model_class).train()
    output = model(**unlabelled_inputs(model_class))
    assert output_cache(output) is None


@head_ids
def test_return_dict_false_gives_the_outputs_tuple(model_class):
    model = build(model_class).eval()
    inputs, labels = inputs_and_labels(model_class)
    output = model(**inputs, **labels)
    as_tuple = model(**inputs, **labels, return_dict=False)
    assert isinstance(as_tuple, tuple) and not isinstance(as_tuple, ModelOutput)
    expected, actual = tensors(output.to_tuple()), tensors(as_tuple)
    assert len(actual) == len(expected) > 0
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


@head_ids
def test_trainer_predictions_hold_neither_a_loss_term_nor_the_cache(model_class, tmp_path):
    """`Trainer.evaluate` / `predict` hand `compute_metrics` an output's tensors but `loss` and the config's
    `keys_to_ignore_at_inference`, a lone one as itself (as transformers' heads give them): a term of the loss (BERT's
    `mlm_loss`, GPT's `classification_loss` and `lm_loss`) or the cache is no prediction."""
    extra = {"lm_loss_weight": 0.5} if model_class in (LineageGptForSequenceClassification,
                                                       LineageGptForMultipleChoice) else {}
    model = build(model_class, **extra).eval()
    inputs, labels = inputs_and_labels(model_class)
    assert {"classification_loss", "lm_loss"} <= set(model(**inputs, **labels)) if extra else True
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = transformers.Trainer(model=model, args=args)
    loss, predictions, _ = trainer.prediction_step(model, {**inputs, **labels}, prediction_loss_only=False)
    assert (loss is not None and loss.dim() == 0) if labels else loss is None
    predictions = predictions if isinstance(predictions, tuple) else (predictions,)
    assert predictions and all(isinstance(p, torch.Tensor) and p.dim() > 0 for p in predictions), [
        type(p).__name__ if not isinstance(p, torch.Tensor) else tuple(p.shape) for p in predictions]


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("model_class", sorted(TOKEN_LOSS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_num_items_in_batch_divides_the_summed_token_loss(model_class, mode):
    """Trainer's gradient-accumulation contract, the same for every head with a per-token loss, on the fused
    (training) and the logits (evaluation) paths: loss = sum over tokens / num_items_in_batch."""
    model = build(model_class).train(mode == "train")
    inputs, labels = inputs_and_labels(model_class)
    causal = model_class in (LineageBertLMHeadModel, LineageGptForCausalLM)
    targets = labels["labels"][:, 1:] if causal else labels["labels"]  # a causal head predicts from the second on
    count = int((targets != -100).sum())
    mean = model(**inputs, **labels).loss
    assert getattr(model_class, "accepts_loss_kwargs", True)  # Trainer passes the count
    for items in (count, 7 * count):
        loss = model(**inputs, **labels, num_items_in_batch=torch.tensor(items)).loss
        torch.testing.assert_close(loss * items, mean * count, rtol=1e-5, atol=1e-6)


NUM_LABELS = r"`labels` must be -100 \(ignored\) or in \[0, 2\) \(num_labels=2\)"
NUM_CHOICES = r"`labels` must be -100 \(ignored\) or in \[0, 3\) \(num_choices=3\)"
OUT_OF_RANGE = {  # head -> (labels with one out of range, what the error says)
    LineageBertForPreTraining: ({"next_sentence_label": torch.tensor([0, 2])},
                                r"`next_sentence_label` must be .*\[0, 2\)"),
    LineageBertForMaskedLM: ({"labels": torch.full((B, T), V)}, r"`labels` must be -100 \(ignored\) or in \[0, 99\)"),
    LineageBertLMHeadModel: ({"labels": torch.full((B, T), V)}, r"`labels` must be -100 \(ignored\) or in \[0, 99\)"),
    LineageGptForCausalLM: ({"labels": torch.full((B, T), V)}, r"`labels` must be -100 \(ignored\) or in \[0, 99\)"),
    LineageBertForNextSentencePrediction: ({"labels": torch.tensor([0, 2])}, r"`labels` must be .*\[0, 2\)"),
    LineageBertForSequenceClassification: ({"labels": torch.tensor([0, 2])}, NUM_LABELS),
    LineageGptForSequenceClassification: ({"labels": torch.tensor([0, 2])}, NUM_LABELS),
    LineageBertForTokenClassification: ({"labels": torch.full((B, T), 2)}, NUM_LABELS),
    LineageBertForMultipleChoice: ({"labels": torch.tensor([0, CHOICES])}, NUM_CHOICES),
    LineageGptForMultipleChoice: ({"labels": torch.tensor([0, CHOICES])}, NUM_CHOICES),
    LineageTransformerForConditionalGeneration: ({"labels": torch.full((B, T - 1), V)},
                                                 r"`labels` must be -100 \(ignored\) or in \[0, 99\)"),
    LineageRnnForConditionalGeneration: ({"labels": torch.full((B, T - 1), V)},
                                         r"`labels` must be -100 \(ignored\) or in \[0, 99\)"),
}


@pytest.mark.parametrize("model_class", list(OUT_OF_RANGE), ids=lambda c: c.__name__)
def test_labels_out_of_range_are_refused_by_name(model_class):
    model = build(model_class).eval()
    inputs, labels = inputs_and_labels(model_class)
    bad, message = OUT_OF_RANGE[model_class]
    with pytest.raises(ValueError, match=message):
        model(**inputs, **{**labels, **bad})


@pytest.mark.parametrize("model_class", [LineageBertForSequenceClassification, LineageGptForSequenceClassification],
                         ids=lambda c: c.__name__)
def test_regression_and_multi_label_targets_are_values_not_class_indices(model_class):
    inputs, _ = inputs_and_labels(model_class)
    regression = build(model_class, num_labels=1).eval()
    assert regression(**inputs, labels=torch.tensor([3, 7])).loss > 0  # integer targets of a regression
    multi_label = build(model_class, num_labels=2, problem_type="multi_label_classification").eval()
    assert multi_label(**inputs, labels=torch.tensor([[1.0, 0.0], [1.0, 1.0]])).loss > 0


@head_ids
def test_inputs_on_another_device_are_refused_naming_the_argument_and_both_devices(model_class):
    """The model on the CPU, `input_ids` on the `meta` device (as far from it as a CPU-only machine allows)."""
    model = build(model_class).eval()
    inputs = unlabelled_inputs(model_class)
    inputs["input_ids"] = inputs["input_ids"].to("meta")
    with pytest.raises(ValueError, match=r"`input_ids` is on meta but the model is on cpu"):
        model(**inputs)


def test_multiple_choice_inputs_are_checked_alike_naming_the_argument_given():
    bert, gpt = build(LineageBertForMultipleChoice).eval(), build(LineageGptForMultipleChoice).eval()
    cases = [({"input_ids": torch.randint(5, V, (B, T))},
              r"`input_ids` must have shape \(batch, num_choices, length\) for multiple choice, got \(2, 6\)"),
             ({"inputs_embeds": torch.randn(B, T, 32)},
              r"`inputs_embeds` must have shape \(batch, num_choices, length, hidden_size\) for multiple choice"),
             ({}, "Specify exactly one of `input_ids` or `inputs_embeds`")]
    for inputs, message in cases:
        for model in (bert, gpt):
            with pytest.raises(ValueError, match=message):
                model(**inputs)


# ------------------------------------------------------------------------------------------------------------
# Defects of the review
# ------------------------------------------------------------------------------------------------------------


def test_bert_lm_head_in_eval_keeps_packed_documents_apart_and_refuses_a_cache_for_them():
    model = build(LineageBertLMHeadModel).eval()
    first, second = torch.randint(5, V, (1, 5)), torch.randint(5, V, (1, 4))
    packed = torch.cat([first, second], dim=1)
    positions = torch.cat([torch.arange(5), torch.arange(4)])[None]
    with torch.no_grad():
        together = model(packed, position_ids=positions)  # eval: use_cache defaults to True
        alone = model(second)
    assert together.past_key_values is None
    torch.testing.assert_close(together.logits[:, 5:], alone.logits, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="Packed rows .* cannot use a key/value cache"):
        model(packed, position_ids=positions, use_cache=True)


@pytest.mark.parametrize("model_class", [LineageBertForMaskedLM, LineageGptForCausalLM, *sorted(
    SEQ2SEQ - {LineageTransformerModel, LineageRnnModel}, key=lambda c: c.__name__)], ids=lambda c: c.__name__)
def test_resize_with_a_non_integer_multiple_gets_transformers_error(model_class):
    model = build(model_class)
    with pytest.raises(ValueError, match="Asking to pad the embedding matrix to a multiple of `1.3`, which is not and "
                                         "integer. Please make sure to pass an integer"):
        model.resize_token_embeddings(120, pad_to_multiple_of=1.3)
    assert model.config.vocab_size == V  # nothing changed


@pytest.mark.parametrize("model_class", [LineageBertLMHeadModel, LineageGptForCausalLM, *sorted(
    SEQ2SEQ - {LineageTransformerModel, LineageRnnModel}, key=lambda c: c.__name__)], ids=lambda c: c.__name__)
@pytest.mark.parametrize("beams", [0, -1])
def test_generate_refuses_a_beam_count_below_one(model_class, beams):
    model = build(model_class).eval()
    with pytest.raises(ValueError, match=rf"`num_beams` must be a positive integer \(1: no beam search\), got {beams}"):
        model.generate(torch.randint(5, V, (1, 4)), num_beams=beams, max_new_tokens=2)


@head_ids
@pytest.mark.parametrize("keyword", ["not_an_argument", "cache_params", "token_type_idz", "cu_seq_lens_q"])
def test_a_keyword_the_forward_does_not_use_is_refused_by_name(model_class, keyword):
    """A renamed or misspelt argument is an error naming it, never dropped: the next rename upstream fails here.
    transformers' boundaries of packed rows (`cu_seq_lens_q`, ...) are taken by the GPT trained on packed rows and its
    base model (test_packing.py), refused by the others."""
    if keyword in inspect.signature(model_class.forward).parameters:
        assert model_class in (LineageGptForCausalLM, modeling.LineageGptModel)
        return
    model = build(model_class).eval()
    with pytest.raises(TypeError, match=rf"{model_class.__name__}.forward\(\) got an unexpected keyword argument "
                                        rf"'{keyword}'; it takes .*input"):
        model(**unlabelled_inputs(model_class), **{keyword: None})


@head_ids
def test_every_head_takes_the_collators_packed_sequences_and_gives_the_same_outputs(model_class):
    """The collators add `packed_sequences` (their rows' real tokens, found on the CPU) to every batch: every head
    takes them, and its outputs are bit for bit those without them (a padded row and an unpadded one here)."""
    model = build(model_class).eval()
    inputs, labels = inputs_and_labels(model_class)
    sequences = PackedSequences.for_batch(inputs["attention_mask"].flatten(0, -2))  # choices: flattened rows
    expected = tensors(model(**inputs, **labels).to_tuple())
    actual = tensors(model(**inputs, **labels, packed_sequences=sequences).to_tuple())
    assert len(actual) == len(expected) > 0
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)


@head_ids
def test_the_signature_lists_exactly_what_the_forward_takes(model_class):
    """What transformers inspects (Trainer's label names, generate()'s encoder arguments) is what the forward takes:
    no `**kwargs`, the cache under the installed name only, transformers' own keywords listed."""
    parameters = inspect.signature(model_class.forward).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    assert TRANSFORMERS_KEYWORDS <= set(parameters)
    assert "cache" not in parameters or CACHE_NAME == "cache"
    assert OLD_CACHE_NAME not in parameters or CACHE_NAME == OLD_CACHE_NAME


@pytest.mark.parametrize("model_class", [c for c in HEADS if c.accepts_loss_kwargs is False], ids=lambda c: c.__name__)
def test_a_per_example_loss_refuses_a_token_count(model_class):
    model = build(model_class).eval()
    inputs, labels = inputs_and_labels(model_class)
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_items_in_batch'"):
        model(**inputs, **labels, num_items_in_batch=torch.tensor(5))


@generative_ids
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_the_cache_is_taken_under_both_names_and_returned_under_the_installed_one(model_class):
    model = build(model_class).eval()
    inputs = unlabelled_inputs(model_class)
    first = model(**inputs, use_cache=True)
    assert output_cache(first) is not None and CACHE_NAME in first.keys()
    step = {"decoder_input_ids": inputs["decoder_input_ids"][:, -1:]} if model_class in SEQ2SEQ else {
        "input_ids": inputs["input_ids"][:, -1:],
        "attention_mask": torch.cat([inputs["attention_mask"], torch.ones(B, 1, dtype=torch.long)], 1)}
    if model_class in SEQ2SEQ:
        step = {**inputs, **step}
    new, old = (output_cache(model(**inputs, use_cache=True)) for _ in range(2))
    torch.testing.assert_close(model(**step, cache=new).logits, model(**step, past_key_values=old).logits,
                               rtol=0, atol=0)
    assert new.get_seq_length() == old.get_seq_length() == output_cache(first).get_seq_length() + 1
    with pytest.raises(TypeError, match="got the cache twice, as `cache` and `past_key_values`"):
        model(**step, cache=output_cache(first), past_key_values=output_cache(first))


@pytest.mark.parametrize("model_class", [LineageBertLMHeadModel, LineageGptForCausalLM], ids=lambda c: c.__name__)
def test_shift_labels_are_checked_by_name_and_left_out_of_the_label_names(model_class):
    """`shift_labels` come with `labels` and are checked as they are; Trainer reads its label names from the signature
    (`find_labels`), where they are left out as transformers' causal LMs leave them (taken in `**kwargs`), so a batch
    without them still has its labels."""
    model = build(model_class).eval()
    inputs, labels = inputs_and_labels(model_class)
    cases = [({"shift_labels": labels["labels"]}, r"`shift_labels` .* come with `labels`"),
             ({**labels, "shift_labels": labels["labels"][:, 1:]}, r"`shift_labels` must have shape \(2, 6\)"),
             ({**labels, "shift_labels": torch.full((B, T), V)}, r"`shift_labels` must be -100 \(ignored\) or in "
                                                                  r"\[0, 99\) \(vocab_size=99\), got 99")]
    for given, message in cases:
        with pytest.raises(ValueError, match=message):
            model(**inputs, **given)
    assert transformers.utils.generic.find_labels(model_class) == ["labels"]


def test_the_old_cache_name_warns_as_transformers_own_classes_do():
    """transformers 5.24's forwards give a FutureWarning for `past_key_values` (`deprecate_kwarg`), once per call site
    under Python's default filter; 5.23's, where it is the current name, give none. Every generative head says what
    the reference GPT-2 says, with its own name, as often."""
    reference = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_embd=32, n_layer=1, n_head=4, n_positions=16, bos_token_id=0, eos_token_id=0)).eval()
    said = {}
    for model in (reference, *(build(model_class).eval() for model_class in GENERATIVE)):
        inputs = {"input_ids": torch.randint(5, V, (B, T))} if model is reference else unlabelled_inputs(type(model))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for _ in range(3):
                model(**inputs, past_key_values=None)
        said[type(model).__name__] = [(w.category, str(w.message).replace(type(model).__name__, "<class>"))
                                      for w in caught]
    assert len(said["GPT2LMHeadModel"]) == (CACHE_NAME != OLD_CACHE_NAME)
    for name in said:
        assert said[name] == said["GPT2LMHeadModel"], name


@pytest.mark.parametrize("name", ["bert-tiny", "gpt-tiny", "transformer-tiny"])
@pytest.mark.parametrize("field, value, message", [
    ("layer_norm_eps", 0.0, r"`layer_norm_eps` must be a positive number \(e.g. 1e-12\), got 0.0"),
    ("layer_norm_eps", -1e-5, r"`layer_norm_eps` must be a positive number"),
    ("initializer_range", -0.02, r"`initializer_range` must be a number >= 0 .*got -0.02"),
    ("pad_token_id", V, r"`pad_token_id` must be None or in \[0, 99\) \(vocab_size\), got 99"),
    ("num_attention_heads", 5, r"`hidden_size` \(32\) must be divisible by `num_attention_heads` \(5\)"),
    ("hidden_size", 30, r"`hidden_size` \(30\) must be divisible by `num_attention_heads` \(4\)"),
    ("norm_position", "middle", r"`norm_position` must be one of \('post', 'pre'\), got 'middle'"),
    ("hidden_act", "tanh", r"`hidden_act` must be one of \('relu', 'gelu', 'gelu_new', 'silu'\), got 'tanh'"),
    ("hidden_act", "gelu_fast", r"`hidden_act` must be one of .*got 'gelu_fast'"),
    ("hidden_dropout_prob", 1.5, r"`hidden_dropout_prob` must be in \[0, 1\), got 1.5"),
])
def test_configs_refuse_values_outside_their_range(name, field, value, message):
    with pytest.raises(ValueError, match=message):
        preset(name, **{field: value})


FAMILY_BAD_VALUES = [  # (preset, fields, what the error says): the fields one family has
    ("bert-tiny", {"type_vocab_size": 0}, "`type_vocab_size` must be a positive integer"),
    ("bert-tiny", {"is_decoder": "yes"}, "`is_decoder` must be True or False"),
    ("gpt-tiny", {"eos_token_id": -1}, "`eos_token_id`"),
    ("gpt-tiny", {"lm_loss_weight": -0.5}, "`lm_loss_weight`"),
    ("gpt-tiny", {"classifier_dropout": 1.0}, "`classifier_dropout`"),
    ("transformer-tiny", {"position_embedding_type": "rotary"},
     "`position_embedding_type` must be one of ('sinusoidal', 'learned')"),
    ("transformer-tiny", {"sinusoidal_layout": "zigzag"},
     "`sinusoidal_layout` must be one of ('interleaved', 'split')"),
    ("transformer-tiny", {"label_smoothing": 1.0}, "`label_smoothing` must be in [0, 1)"),
    ("transformer-tiny", {"decoder_start_token_id": 99}, "`decoder_start_token_id` must be None or in [0, 99)"),
    ("transformer-tiny", {"scale_embedding": "yes"}, "`scale_embedding` must be True or False"),
    ("rnn-tiny", {"cell": "rnn"}, "`cell` must be one of ('gru', 'lstm'), got 'rnn'"),
    ("rnn-tiny", {"attention": "multihead"}, "`attention` must be one of ('none', 'bahdanau', 'luong-dot', "
                                           "'luong-general', 'luong-concat'), got 'multihead'"),
    ("rnn-tiny", {"bridge": "mean"}, "`bridge` must be one of ('none', 'last', 'linear')"),
    ("rnn-tiny", {"bidirectional_decoder": True}, "`bidirectional_decoder` cannot be True"),
    ("rnn-tiny", {"hidden_size": 33}, "`hidden_size` must be even with `bidirectional_encoder=True`"),
    ("rnn-tiny", {"num_decoder_layers": 1}, "`num_decoder_layers` (1) must equal `num_encoder_layers` (2)"),
    ("rnn-tiny", {"tie_word_embeddings": True},
     "`tie_word_embeddings=True` needs `embedding_size` (16) equal to the width the output projection reads (32"),
    ("rnn-tiny", {"maxout_size": 0}, "`maxout_size` is the width of Bahdanau's deep output, a positive integer"),
    ("rnn-tiny", {"attention": "luong-dot", "maxout_size": 8}, "with attention='bahdanau' (None: hidden_size); got 8"),
    ("rnn-tiny", {"input_feeding": 1}, "`input_feeding` must be True or False, got 1"),
    ("rnn-tiny", {"hidden_size": 0}, "`hidden_size` must be a positive integer"),
    ("rnn-tiny", {"label_smoothing": 1.0}, "`label_smoothing` must be in [0, 1)"),
    ("rnn-tiny", {"decoder_start_token_id": 99}, "`decoder_start_token_id` must be None or in [0, 99)"),
    ("rnn-tiny", {"pad_token_id": V}, "`pad_token_id` must be None or in [0, 99)"),
    ("rnn-tiny", {"attention": "none", "input_feeding": True}, "`input_feeding` needs a Luong attention"),
    ("rnn-tiny", {"attention": "bahdanau", "input_feeding": True}, "got attention='bahdanau'"),
    ("rnn-tiny", {"attention": "none", "bridge": "none"},
     "`bridge` must be 'last' or 'linear' with `attention='none'`"),
]


@pytest.mark.parametrize("name, fields, fragment", FAMILY_BAD_VALUES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in f.items())}" for n, f, _ in FAMILY_BAD_VALUES])
def test_each_family_refuses_its_own_fields_outside_their_range(name, fields, fragment):
    with pytest.raises(ValueError) as error:
        preset(name, **fields)
    assert fragment in str(error.value)


@pytest.mark.parametrize("config_class, pretrained, module", modeling._FAMILIES,
                         ids=[config_class.model_type for config_class, _, _ in modeling._FAMILIES])
def test_an_unknown_attention_implementation_is_refused_by_every_head(config_class, pretrained, module):
    config = preset(PRESETS[family(pretrained)])
    for class_name in dict.fromkeys(pretrained.auto_classes.values()):
        model_class = getattr(module, class_name)
        with pytest.raises(ValueError, match=r"`attn_implementation=\"magic\"` is not supported"):
            model_class._from_config(config, attn_implementation="magic")
        with pytest.raises(ValueError, match="attn_implementation"):
            model_class(preset(PRESETS[family(pretrained)], attn_implementation="magic"))


def test_the_python_docs_recipe_data_comes_from_the_train_package(tmp_path):
    from train.python_docs import DEFAULT_FOLDER, main
    from train.run.recipes import load_recipe

    train_file, validation_file = main([str(tmp_path / "docs")])
    train_lines = train_file.read_text().splitlines()
    held_out = validation_file.read_text().splitlines()
    assert len(train_lines) > 5 * len(held_out) > 0  # every tenth topic held out
    assert all(line and " ".join(line.split()) == line for line in train_lines + held_out)  # one paragraph a line
    recipe = load_recipe("relative-gpt-python-docs")
    assert (recipe.train_file, recipe.validation_file) == (f"{DEFAULT_FOLDER}/train.txt",
                                                           f"{DEFAULT_FOLDER}/validation.txt")


def test_the_train_package_reaches_models_through_modeling_not_a_family_module():
    """The commands build models through the Auto classes: importing a family module would tie them to one."""
    offenders = []
    for path in sorted((REPO / "train").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            if any(".modeling_lineage_" in n or n.startswith("modeling_lineage_") for n in [module or "", *names]):
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


OFFLOADED = [(model_class, {}) for model_class in HEADS] + [
    (LineageBertForMaskedLM, {"position_embedding_type": "relative", "max_relative_position": 3}),
    (LineageGptForCausalLM, {"position_embedding_type": "relative-keys", "max_relative_position": 3}),
    (LineageTransformerForConditionalGeneration, {"position_embedding_type": "relative", "max_relative_position": 3}),
    (LineageRnnForConditionalGeneration, {"cell": "lstm", "attention": "luong-general", "input_feeding": True}),
]


@pytest.mark.skipif(Version(accelerate.__version__) < Version("1.15"),
                    reason="accelerate before 1.15 refuses to offload a whole model to disk ('use disk_offload')")
@pytest.mark.parametrize("model_class, overrides", OFFLOADED,
                         ids=[f"{c.__name__}-{'-'.join(map(str, o.values())) or 'default'}" for c, o in OFFLOADED])
def test_a_model_offloaded_by_device_map_gives_the_outputs_and_tokens_of_the_model_in_memory(model_class, overrides,
                                                                                             tmp_path):
    """`from_pretrained(device_map="auto")` beyond the memory given offloads the weights: accelerate's hooks load a
    module's weights for its own call only, so a weight read outside that call (the RNN's cells, the relative
    tables, the output layer's in the training loss without logits) was an empty placeholder: wrong outputs, or an
    error naming the meta device."""
    model = build(model_class, **overrides).eval()
    model.save_pretrained(tmp_path / "model")
    offloaded = type(model).from_pretrained(tmp_path / "model", device_map="auto", max_memory={"cpu": "1KB"},
                                            offload_folder=tmp_path / "offload").eval()
    assert set(offloaded.hf_device_map.values()) == {"disk"}
    inputs, labels = inputs_and_labels(model_class)
    calls = [unlabelled_inputs(model_class), {**inputs, **labels}] if labels else [unlabelled_inputs(model_class)]
    for call in calls:
        for actual, expected in zip(tensors(offloaded(**call).to_tuple()), tensors(model(**call).to_tuple()),
                                    strict=True):
            torch.testing.assert_close(actual, expected)
    if labels:
        torch.testing.assert_close(offloaded.train()(**inputs, **labels).loss, model.train()(**inputs, **labels).loss)
    if model_class in GENERATIVE:
        prompt = {"input_ids": inputs["input_ids"][:, :3], "attention_mask": inputs["attention_mask"][:, :3]}
        assert torch.equal(offloaded.eval().generate(**prompt, max_new_tokens=3, do_sample=False),
                           model.eval().generate(**prompt, max_new_tokens=3, do_sample=False))


@pytest.mark.skipif(Version(accelerate.__version__) < Version("1.15"),
                    reason="accelerate 1.9 (the floor) splits modules named in no_split_module_classes in this plan")
@head_ids
def test_a_device_map_over_several_devices_keeps_each_block_and_rnn_encoder_and_decoder_on_one(model_class):
    """Over devices too small for the whole model, accelerate places submodules apart except those the model names
    (`_no_split_modules`, read as transformers reads it for `device_map="auto"`): an RNN decoder's embeddings,
    recurrence and attention on two devices failed at its first step, which concatenates their outputs."""
    model = build(model_class)
    total = compute_module_sizes(model)[""]
    device_map = infer_auto_device_map(model, max_memory={0: total // 3, 1: total // 3, 2: total},
                                       no_split_module_classes=model._no_split_modules)
    assert len(set(device_map.values())) > 1
    whole = {"LineageBlock", "LineageRnnEncoder", "LineageRnnDecoder", "BahdanauDecoder", "LuongDecoder"}
    kept = [name for name, module in model.named_modules() if type(module).__name__ in whole]
    assert kept and not [key for key in device_map for name in kept if key.startswith(f"{name}.")]
