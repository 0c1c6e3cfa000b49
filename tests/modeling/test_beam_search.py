"""`gnmt_beam_search`, the paper's decoding as `generate(custom_generate=...)`: its scores are the model's own
log-probabilities under GNMT's penalty, one beam without a penalty is greedy search, a batch decodes as its examples
one by one, and `extra_length` bounds each output by its own source."""

import itertools

import pytest
import torch
from conftest import preset
from transformers import AutoModelForSeq2SeqLM

from modeling.beam_search import gnmt_beam_search, gnmt_penalty

FAMILIES = ["transformer-tiny", "rnn-tiny"]


def model_and_batch(name: str):
    """A tiny model whose end token is likely enough that hypotheses finish (its output row scaled: -3 does it for
    both seeded tiny models), and three sources, one padded."""
    torch.manual_seed(0)
    config = preset(name)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight[config.eos_token_id] *= -3
    ids = torch.randint(5, config.vocab_size, (3, 7))
    mask = torch.ones_like(ids)
    ids[1, 4:], mask[1, 4:] = config.pad_token_id, 0
    return model, ids, mask


def generated(model, sequence: torch.Tensor) -> torch.Tensor:
    """The decoder tokens of one returned hypothesis: the start token through its end token (or its last)."""
    tokens = sequence.tolist()
    end = next((i for i in range(1, len(tokens)) if tokens[i] == model.config.eos_token_id), None)
    if end is None:
        end = max(i for i in range(len(tokens)) if tokens[i] != model.config.pad_token_id)
    return sequence[:end + 1]


def log_probability(model, ids, mask, target: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(input_ids=ids[None, :int(mask.sum())], decoder_input_ids=target[None, :-1]).logits
    return float(logits[0].log_softmax(-1).gather(1, target[1:, None]).sum())


@pytest.mark.parametrize("name", FAMILIES)
def test_scores_are_the_models_log_probabilities_under_gnmt_penalty(name):
    """Every returned hypothesis, best first, scores log P(Y | X) / ((5 + |Y|) / 6) ** alpha by a teacher-forced
    forward pass of the model (so the cache followed each hypothesis through the beam's reorderings)."""
    model, ids, mask = model_and_batch(name)
    out = model.generate(input_ids=ids, attention_mask=mask, num_beams=4, num_return_sequences=3, max_new_tokens=9,
                         length_penalty=0.6, custom_generate=gnmt_beam_search, return_dict_in_generate=True)
    scores = out.sequences_scores.view(3, 3)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])
    ends = 0
    for row, sequence in enumerate(out.sequences):
        target = generated(model, sequence)
        ends += int(target[-1] == model.config.eos_token_id)
        want = log_probability(model, ids[row // 3], mask[row // 3], target) / gnmt_penalty(len(target) - 1, 0.6)
        assert float(out.sequences_scores[row]) == pytest.approx(want, abs=1e-4), row
    assert ends > 0  # some hypotheses finished on their end token, not only at the length bound


@pytest.mark.parametrize("name", FAMILIES)
def test_one_beam_without_a_penalty_is_greedy_search(name):
    model, ids, mask = model_and_batch(name)
    greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=9, do_sample=False)
    ours = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=9, num_beams=1, length_penalty=0.0,
                          custom_generate=gnmt_beam_search)
    assert torch.equal(ours, greedy[:, :ours.shape[1]])
    assert bool((greedy[:, ours.shape[1]:] == model.config.pad_token_id).all())


@pytest.mark.parametrize("name", FAMILIES)
def test_a_batch_decodes_as_its_examples_one_by_one(name):
    model, ids, mask = model_and_batch(name)
    settings = {"num_beams": 4, "max_new_tokens": 9, "length_penalty": 0.6, "custom_generate": gnmt_beam_search}
    batch = model.generate(input_ids=ids, attention_mask=mask, **settings)
    for row in range(3):
        alone = model.generate(input_ids=ids[row:row + 1, :int(mask[row].sum())], **settings)[0]
        assert torch.equal(batch[row, :len(alone)], alone), row
        assert bool((batch[row, len(alone):] == model.config.pad_token_id).all()), row


@pytest.mark.parametrize("name", FAMILIES)
def test_extra_length_bounds_each_output_by_its_own_source(name):
    """With the end token suppressed every hypothesis runs to its bound: source length + extra_length new tokens,
    or max_new_tokens where that is smaller; `extra_length=None` leaves max_new_tokens alone."""
    model, ids, mask = model_and_batch(name)
    end = model.config.eos_token_id
    for extra, max_new, want in ((2, 20, [9, 6, 9]), (2, 8, [8, 6, 8]), (None, 8, [8, 8, 8])):
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=3, max_new_tokens=max_new,
                             suppress_tokens=[end], custom_generate=gnmt_beam_search, extra_length=extra)
        lengths = [int((row[1:] != model.config.pad_token_id).sum()) for row in out]
        assert lengths == want, (extra, max_new)


def test_bad_settings_are_refused_before_decoding():
    model, ids, mask = model_and_batch("transformer-tiny")
    with pytest.raises(ValueError, match="extra_length must be an integer >= 0"):
        model.generate(input_ids=ids, num_beams=2, max_new_tokens=4, custom_generate=gnmt_beam_search, extra_length=-1)
    with pytest.raises(ValueError, match="it does not sample: set do_sample=False"):
        model.generate(input_ids=ids, num_beams=2, max_new_tokens=4, do_sample=True, custom_generate=gnmt_beam_search)
    with pytest.raises(ValueError, match="sequences and sequences_scores only: leave out output_scores"):
        model.generate(input_ids=ids, num_beams=2, max_new_tokens=4, return_dict_in_generate=True, output_scores=True,
                       custom_generate=gnmt_beam_search)


def test_a_beam_as_wide_as_the_tree_finds_the_best_scoring_translation():
    """Over a vocabulary of 7 with at most 3 new tokens (source of 1 + extra_length 2), 36 beams keep every live
    hypothesis: the search is exhaustive, so its answer is the brute-force best GNMT score of every translation that
    ends on the end token or at the bound (the early stop, when taken, must not change it)."""
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(preset("transformer-tiny", vocab_size=7)).eval()
    source, end, alpha = torch.tensor([[5]]), model.config.eos_token_id, 0.6
    out = model.generate(input_ids=source, num_beams=36, max_new_tokens=10, length_penalty=alpha, extra_length=2,
                         custom_generate=gnmt_beam_search, return_dict_in_generate=True)
    start = model.config.decoder_start_token_id
    best = {}
    for length in (1, 2, 3):
        for tokens in itertools.product(range(7), repeat=length):
            if end in tokens[:-1] or (length < 3 and tokens[-1] != end):
                continue
            target = torch.tensor([start, *tokens])
            best[tokens] = log_probability(model, source[0], torch.ones(1), target) / gnmt_penalty(length, alpha)
    want = max(best, key=best.get)
    assert out.sequences[0, 1:1 + len(want)].tolist() == list(want)
    assert float(out.sequences_scores[0]) == pytest.approx(best[want], abs=1e-4)
