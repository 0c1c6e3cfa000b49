"""pretrain_gpt's samples pad their prompts on the left whatever the tokenizer's `padding_side` says (a checkpoint's
own GPT-2 tokenizer pads on the right): a shorter prompt then continues from its own last token, not from padding."""

import torch
from conftest import preset

from modeling import LineageGptForCausalLM
from train.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from train.pretrain_gpt import sample

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "she reads a book every night", "birds fly south"] * 4
PROMPTS = ["a", "the cat sat on the mat", "she", "a dog ran in the park every night", "birds"]


def test_samples_of_a_right_padding_tokenizer_are_those_of_left_padding():
    tokenizer = train_tokenizer("gpt", TEXTS, 300)
    torch.manual_seed(0)
    model = LineageGptForCausalLM(preset("gpt-tiny", **config_kwargs_from_tokenizer(tokenizer, "gpt"))).eval()
    tokenizer.padding_side = "right"
    right = sample(model, tokenizer, PROMPTS, max_new_tokens=6, seed=1)
    tokenizer.padding_side = "left"
    left = sample(model, tokenizer, PROMPTS, max_new_tokens=6, seed=1)
    assert right == left
    assert all(text.startswith(prompt) for text, prompt in zip(left, PROMPTS))
