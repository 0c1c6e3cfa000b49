"""Tiny transformers reference checkpoints, made here, as a user would find them in a folder or on the Hub: a
BERT, GPT-2, OpenAI GPT or Marian model with its tokenizer (trained with `tokenizers` and wrapped in the reference
tokenizer class; Marian's needs sentencepiece, so a generic fast tokenizer stands in), and the Hugging Face cache
layout that `huggingface_hub` reads offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from train.data.tokenization import train_tokenizer

TEXTS = [
    "the cat sat on the mat", "a dog ran in the park", "this film was great fun", "what a dull and boring film",
    "the weather is nice today", "she reads a book every night", "he plays the guitar well", "birds fly south",
    "i loved every minute of it", "the plot made no sense at all", "a man is sleeping", "a woman is cooking",
] * 4
SIZES = {"hidden": 32, "layers": 2, "heads": 4, "intermediate": 37, "positions": 64}


def _bpe_vocab(tokenizer: Tokenizer) -> tuple[dict[str, int], list[tuple[str, str]]]:
    model = json.loads(tokenizer.to_str())["model"]
    return model["vocab"], [tuple(pair) for pair in model["merges"]]


def bert_tokenizer() -> transformers.BertTokenizer:
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(TEXTS, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    return transformers.BertTokenizer(vocab=backend.get_vocab())


def gpt2_tokenizer() -> transformers.GPT2Tokenizer:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    vocab, merges = _bpe_vocab(backend)
    return transformers.GPT2Tokenizer(vocab=vocab, merges=merges)


def openai_gpt_tokenizer() -> transformers.OpenAIGPTTokenizer:
    backend = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=200, special_tokens=["<unk>"], end_of_word_suffix="</w>", show_progress=False))
    vocab, merges = _bpe_vocab(backend)
    return transformers.OpenAIGPTTokenizer(vocab=vocab, merges=merges)


def marian_tokenizer():
    return train_tokenizer("seq2seq", TEXTS + ["one two three", "eins zwei drei"], 200)


def reference_model(name: str, tokenizer, dropout: float = 0.1, **config):
    """A tiny reference model of class `name` (BertForPreTraining, GPT2LMHeadModel, ...) sized for `tokenizer`."""
    torch.manual_seed(0)
    s = SIZES
    if name.startswith("Bert"):
        cfg = transformers.BertConfig(
            vocab_size=len(tokenizer), hidden_size=s["hidden"], num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"], intermediate_size=s["intermediate"], max_position_embeddings=s["positions"],
            hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, pad_token_id=tokenizer.pad_token_id,
            **config)
    elif name.startswith(("GPT2", "OpenAIGPT")):
        cls = transformers.GPT2Config if name.startswith("GPT2") else transformers.OpenAIGPTConfig
        ids = ({"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
               if name.startswith("GPT2") else {})
        cfg = cls(vocab_size=len(tokenizer), n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                  n_positions=s["positions"], resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, **ids,
                  **config)
    else:
        cfg = transformers.MarianConfig(
            vocab_size=len(tokenizer), decoder_vocab_size=len(tokenizer), d_model=s["hidden"], encoder_layers=2,
            decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=s["intermediate"],
            decoder_ffn_dim=s["intermediate"], max_position_embeddings=s["positions"], dropout=dropout,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id, forced_eos_token_id=None, **config)
    return getattr(transformers, name)(cfg).eval()


TOKENIZERS = {"Bert": bert_tokenizer, "GPT2": gpt2_tokenizer, "OpenAIGPT": openai_gpt_tokenizer,
              "Marian": marian_tokenizer}


def save_reference(folder: Path, name: str, dropout: float = 0.1, **config) -> Path:
    """A folder holding a tiny `name` checkpoint and its tokenizer, as `save_pretrained` writes them."""
    tokenizer = TOKENIZERS[next(prefix for prefix in TOKENIZERS if name.startswith(prefix))]()
    reference_model(name, tokenizer, dropout, **config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def put_in_hub_cache(folder: Path, cache: Path, repo_id: str, commit: str = "0123456789abcdef" * 2 + "01234567"
                     ) -> Path:
    """Copy `folder` into the Hugging Face cache at `cache` as the `main` revision of the model repo `repo_id`
    (`models--org--name/snapshots/<commit>/...`, `refs/main`), the layout `huggingface_hub` reads offline."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
