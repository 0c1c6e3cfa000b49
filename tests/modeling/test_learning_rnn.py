"""It learns, and attention is why: small `lineage-rnn` models trained on CPU to reverse random digit strings.

With Luong's general score or Bahdanau's additive attention, greedy decoding reverses at least 99% of held-out
strings (3-8 digits) after 500 Adam steps. With `attention="none"` (the fixed thought vector of Sutskever et al.
2014, everything the decoder knows about the source squeezed into the encoder's final state) the same budget
leaves it far behind on the longest strings, and worse on long strings than on short ones: the argument the seed
papers make for attention, as a test. One torch thread; about 10-15 s per model on a 2-core machine.
"""

import pytest
import torch
from conftest import preset

from modeling import LineageRnnForConditionalGeneration

PAD, BOS, EOS = 0, 1, 2
DIGIT = 4  # ids 4..13 are the digits 0..9
MIN_LENGTH, MAX_LENGTH = 3, 8
STEPS, BATCH, LEARNING_RATE = 500, 64, 1e-2  # 400 left one model at 0.93-0.97 on some CPU kernels


def random_strings(generator: torch.Generator, count: int) -> list[tuple[int, ...]]:
    lengths = torch.randint(MIN_LENGTH, MAX_LENGTH + 1, (count,), generator=generator).tolist()
    return [tuple(torch.randint(0, 10, (n,), generator=generator).tolist()) for n in lengths]


def encode(strings: list[tuple[int, ...]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Digits then `</s>`, right-padded: (ids, attention_mask)."""
    rows = [[DIGIT + d for d in s] + [EOS] for s in strings]
    ids = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return ids, (ids != PAD).long()


def train_and_score(attention: str) -> tuple[float, dict[int, float]]:
    """Train a one-layer GRU encoder-decoder (bidirectional encoder, hidden 48) from seed 0; return the exact-match
    rate of greedy decoding on 300 held-out strings, overall and per string length."""
    torch.manual_seed(0)
    config = preset("rnn-tiny", vocab_size=14, hidden_size=48, embedding_size=32, num_encoder_layers=1,
                     num_decoder_layers=1, attention=attention, hidden_dropout_prob=0.0)
    model = LineageRnnForConditionalGeneration(config)
    generator = torch.Generator().manual_seed(0)
    held_out = sorted(set(random_strings(generator, 300)))
    unseen = set(held_out)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    model.train()
    for _ in range(STEPS):
        batch = [s for s in random_strings(generator, BATCH) if s not in unseen]
        input_ids, attention_mask = encode(batch)
        labels = encode([s[::-1] for s in batch])[0].masked_fill(input_ids == PAD, -100)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()
    input_ids, attention_mask = encode(held_out)
    with torch.no_grad():
        generated = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=MAX_LENGTH + 1,
                                   do_sample=False)[:, 1:]  # after <s>
    expected = encode([s[::-1] for s in held_out])[0]
    by_length: dict[int, list[bool]] = {}
    for i, s in enumerate(held_out):
        end = len(s) + 1
        by_length.setdefault(len(s), []).append(generated[i, :end].tolist() == expected[i, :end].tolist())
    exact = sum(map(sum, by_length.values())) / len(held_out)
    return exact, {length: sum(hits) / len(hits) for length, hits in sorted(by_length.items())}


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def thought_vector(one_thread) -> dict[int, float]:
    return train_and_score("none")[1]


@pytest.mark.parametrize("attention", ["luong-general", "bahdanau"])
def test_attention_learns_to_reverse_digit_strings(one_thread, thought_vector, attention):
    exact, scores = train_and_score(attention)
    assert exact >= 0.99, (exact, scores)
    long = [n for n in scores if n >= MAX_LENGTH - 1]
    with_attention, without = sum(scores[n] for n in long) / 2, sum(thought_vector[n] for n in long) / 2
    assert without < with_attention - 0.5, (thought_vector, scores)  # the thought vector is measurably worse
    assert thought_vector[MIN_LENGTH] > without  # ... and worse on long inputs than on short ones


def test_train_translation_trains_an_rnn_recipe_and_the_folder_translates(tmp_path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    from train import train_translation

    results, folder = train_translation.main(["--recipe", "rnn-translation-tiny",
                                              "--output_dir", str(tmp_path), "--progress_bar", "false",
                                              "--report_to", "none"])
    assert 0 <= results["eval_bleu"] <= 100 and " -> " in results["sample_0"]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    assert type(model).__name__ == "LineageRnnForConditionalGeneration"
    assert model.config.attention == "luong-general" and model.config.input_feeding
    assert model.config.label_smoothing == 0.1 and "sparse_prediction" not in model.config.to_dict()  # a call option
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    translate = pipeline("translation", model=folder, tokenizer=tokenizer, trust_remote_code=True)
    assert isinstance(translate("seventy-two", max_new_tokens=8)[0]["translation_text"], str)
