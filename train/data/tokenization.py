"""Tokenizers for every Lineage family: trained with the `tokenizers` library (`train_tokenizer`, or
`reused_or_trained` from `cache_folder()`), loaded and checked (`load_tokenizer`, `check_special_tokens`,
`check_tokenizer_matches_model`), and a pretrained one completed for the family's tasks (`complete_for_family`).
Saved in the standard files, they load with `AutoTokenizer.from_pretrained(folder)` and no project code; the
templates live in tokenizer.json's post-processor (`install_template`). Each family's model, special tokens (pad id 0)
and templates, and the conventions the models and collators rely on: docs/using.md ("Tokenizers").
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from train.data.staging import staged

FAMILIES = ("bert", "gpt", "seq2seq")
_ALIASES = {"transformer": "seq2seq", "rnn": "seq2seq", "encoder-decoder": "seq2seq"}
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
GPT_SPECIAL_TOKENS = ["[PAD]", "[START]", "[DELIM]", "[EXTRACT]", "<|endoftext|>"]
SEQ2SEQ_SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
END_OF_TEXT = "<|endoftext|>"
_SPECIALS = {"bert": BERT_SPECIAL_TOKENS, "gpt": GPT_SPECIAL_TOKENS, "seq2seq": SEQ2SEQ_SPECIAL_TOKENS}
# role attributes of the transformers tokenizer, per family; the other special tokens are "extra"
_ROLES = {
    "bert": {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
             "mask_token": "[MASK]"},
    "gpt": {"pad_token": "[PAD]", "bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT},
    "seq2seq": {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
}
_BYTE_ALPHABET = 256


class MissingSpecialTokenError(ValueError):
    """A tokenizer lacks a special token its model family needs."""


class VocabularySizeError(ValueError):
    """The requested vocabulary cannot hold the special tokens (and the byte alphabet)."""


class TokenizerPathError(ValueError):
    """A file named where a tokenizer folder belongs."""


class EmptyVocabularyError(ValueError):
    """A tokenizer that holds its special tokens only, so it cannot encode a word."""


class CacheFolderError(OSError):
    """The cache folder (`LINEAGE_CACHE`) cannot be written: the message names it and what to do."""


def canonical_family(family: str) -> str:
    family = _ALIASES.get(family.lower(), family.lower())
    if family not in FAMILIES:
        raise ValueError(f"unknown tokenizer family {family!r}; choose one of {', '.join(FAMILIES)} "
                         f"(or {', '.join(_ALIASES)} for seq2seq)")
    return family


def special_token_names(family: str) -> list[str]:
    """The special tokens of a family, in id order (ids 0, 1, ...)."""
    return list(_SPECIALS[canonical_family(family)])


def minimum_vocab_size(family: str) -> int:
    family = canonical_family(family)
    return len(_SPECIALS[family]) + (_BYTE_ALPHABET if family == "gpt" else 1)


def _backend(family: str, lowercase: bool) -> Tokenizer:
    """An untrained `tokenizers.Tokenizer` with the family's model, normalizer and (de)tokenizers."""
    if family == "bert":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
    elif family == "gpt":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.Sequence([normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else []))
        tok.pre_tokenizer = pre_tokenizers.Sequence([  # punctuation never merges into a word
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"), pre_tokenizers.Punctuation()])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def _trainer(family: str, vocab_size: int, min_frequency: int, show_progress: bool,
             fixed_symbols: list[str]) -> trainers.Trainer:
    common = {"vocab_size": vocab_size, "min_frequency": min_frequency, "show_progress": show_progress,
              "special_tokens": _SPECIALS[family] + fixed_symbols}
    if family == "bert":
        return trainers.WordPieceTrainer(**common, continuing_subword_prefix="##")
    if family == "gpt":
        return trainers.BpeTrainer(**common, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return trainers.BpeTrainer(**common)


def install_template(backend: Tokenizer, family: str, cls: str = "[CLS]", sep: str = "[SEP]") -> None:
    """Set the family's ``tok(a)`` / ``tok(a, b)`` template (module docstring) as ``backend``'s post-processor, after
    the offsets step of a byte-level BPE; ``save_pretrained`` keeps it in tokenizer.json. ``cls`` / ``sep``: a
    pretrained BERT vocabulary's own names for them."""
    if family == "bert":
        single, pair, tokens = f"{cls} $A:0 {sep}:0", f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1", (cls, sep)
    elif family == "gpt":
        single, pair, tokens = "[START] $A [EXTRACT]", "[START] $A [DELIM] $B [EXTRACT]", tuple(GPT_SPECIAL_TOKENS[1:4])
    else:
        single, pair, tokens = "$A </s>", "$A </s> $B </s>", ("</s>",)
    template = processors.TemplateProcessing(single=single, pair=pair,
                                             special_tokens=[(t, backend.token_to_id(t)) for t in tokens])
    byte_level = type(backend.pre_tokenizer).__name__ == "ByteLevel"
    backend.post_processor = (processors.Sequence([processors.ByteLevel(trim_offsets=True), template])
                              if byte_level else template)


def complete_for_family(tokenizer, family: str, templates: bool = True) -> list[str]:
    """Add to a pretrained `tokenizer` the special tokens and template `family`'s tasks need (`templates`: GPT's
    classification templates); returns the added tokens."""
    vocab = tokenizer.get_vocab()
    roles: dict[str, str] = {}
    extra: list[str] = []
    if family == "gpt":
        if tokenizer.eos_token is None:
            roles.update(eos_token=END_OF_TEXT, bos_token=END_OF_TEXT)
        elif tokenizer.bos_token is None:
            roles["bos_token"] = str(tokenizer.eos_token)
        if tokenizer.pad_token is None:
            roles["pad_token"] = GPT_SPECIAL_TOKENS[0]
        if templates:
            extra = [t for t in GPT_SPECIAL_TOKENS[1:4] if t not in vocab]
    elif family == "bert":
        defaults = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                    "mask_token": "[MASK]"}
        roles = {role: token for role, token in defaults.items() if getattr(tokenizer, role) is None}
    else:
        defaults = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
        roles = {role: token for role, token in defaults.items() if getattr(tokenizer, role) is None}
    new = [t for t in dict.fromkeys([*roles.values(), *extra]) if t not in vocab]
    if roles or extra:
        present = [str(t) for t in getattr(tokenizer, "extra_special_tokens", None) or []]
        tokenizer.add_special_tokens({**roles, "extra_special_tokens": present + extra} if extra else roles)
    if family == "gpt" and templates:
        install_template(tokenizer.backend_tokenizer, family)
    elif family == "bert":
        install_template(tokenizer.backend_tokenizer, family, str(tokenizer.cls_token), str(tokenizer.sep_token))
        if "token_type_ids" not in tokenizer.model_input_names:  # in init_kwargs, save_pretrained keeps it
            inputs = [*tokenizer.model_input_names, "token_type_ids"]
            tokenizer.model_input_names = tokenizer.init_kwargs["model_input_names"] = inputs
    return new


def wrap_tokenizer(family: str, backend: Tokenizer, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """Install the family's template on a trained backend and wrap it for transformers."""
    family = canonical_family(family)
    _check_backend_specials(family, backend)
    install_template(backend, family)
    extra = [t for t in _SPECIALS[family] if t not in _ROLES[family].values()]
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if family == "bert" else ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=model_max_length, model_input_names=inputs,
        padding_side="left" if family == "gpt" else "right", extra_special_tokens=extra,
        clean_up_tokenization_spaces=False, **_ROLES[family])


def train_tokenizer(family: str, texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2,
                    model_max_length: int = 512, lowercase: bool | None = None,
                    show_progress: bool = False) -> PreTrainedTokenizerFast:
    """Train a tokenizer of ``family`` ("bert", "gpt", "seq2seq") on ``texts``.

    ``lowercase`` defaults to True for BERT (the uncased model) and False otherwise (byte-level GPT
    never normalizes). ``vocab_size`` counts the special tokens; it is an upper bound, reached when the
    text has enough distinct merges. Save with ``tokenizer.save_pretrained(folder)``. The same texts give the same
    vocabulary in every process (WordPiece reads them twice: an iterator is read into a list first).
    """
    family = canonical_family(family)
    if vocab_size < minimum_vocab_size(family):
        extra = f" and the {_BYTE_ALPHABET} byte symbols" if family == "gpt" else " and at least one symbol"
        raise VocabularySizeError(
            f"vocab_size={vocab_size} is too small for a {family} tokenizer: it must hold the "
            f"{len(_SPECIALS[family])} special tokens {' '.join(_SPECIALS[family])}{extra}; "
            f"use vocab_size >= {minimum_vocab_size(family)}")
    lowercase = family == "bert" if lowercase is None else lowercase
    if family == "gpt" and lowercase:
        raise ValueError("byte-level BPE (gpt) does not normalize text; lowercase it before training")
    backend = _backend(family, lowercase)
    fixed = []
    if family == "bert":
        texts = list(texts) if iter(texts) is texts else texts  # read twice
        fixed = _continuation_symbols(backend, texts)
    counted = _CountingIterator(texts)
    backend.train_from_iterator(counted, _trainer(family, vocab_size, min_frequency, show_progress, fixed))
    if counted.nonempty == 0:
        raise EmptyVocabularyError("train_tokenizer got no non-empty text to train on")
    if fixed:  # handed to the trainer as special tokens only to fix their ids: ordinary tokens from here on
        backend = _rebuilt_without_added_tokens(family, backend, lowercase)
    return wrap_tokenizer(family, backend, model_max_length)


def _continuation_symbols(backend: Tokenizer, texts: Iterable[str]) -> list[str]:
    """``##c`` for every character that continues a word of ``texts``, in code-point order.

    The WordPiece trainer numbers these symbols in the order it meets them while iterating a hash map seeded
    afresh in every process, and it breaks ties between equally frequent merges by symbol id, so the
    vocabulary differed from run to run. Listed up front, the symbols get fixed ids and training is
    reproducible."""
    words = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    words.normalizer, words.pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    words.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=2**32, show_progress=False))
    return [f"##{c}" for c in sorted({c for word in words.get_vocab() for c in word[1:]})]


def _rebuilt_without_added_tokens(family: str, backend: Tokenizer, lowercase: bool) -> Tokenizer:
    """The trained vocabulary in a fresh tokenizer whose only added tokens are the family's special tokens."""
    model = backend.model
    rebuilt = _backend(family, lowercase)
    rebuilt.model = models.WordPiece(backend.get_vocab(with_added_tokens=False), unk_token=model.unk_token,
                                     continuing_subword_prefix=model.continuing_subword_prefix,
                                     max_input_chars_per_word=model.max_input_chars_per_word)
    rebuilt.add_special_tokens(_SPECIALS[family])
    return rebuilt


def cache_folder(writing: bool = False) -> Path:
    """Where Lineage keeps what later runs reuse: `$LINEAGE_CACHE`, else `~/.cache/lineage`. `writing`: checked first
    that this user can create and write it (`CacheFolderError`, naming LINEAGE_CACHE, the folder and the remedy)."""
    folder = Path(os.environ.get("LINEAGE_CACHE") or Path.home() / ".cache" / "lineage").expanduser()
    if not writing:
        return folder
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == p.parent)  # what mkdir would start at
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return folder
    problem = "is not writable by this user" if existing.is_dir() else "is a file, not a folder"
    named = (f"LINEAGE_CACHE={os.environ['LINEAGE_CACHE']}" if os.environ.get("LINEAGE_CACHE")
             else f"the cache folder {folder} (LINEAGE_CACHE is not set)")
    raise CacheFolderError(f"{named}: {existing} {problem}, so Lineage cannot keep its tokenizers, prepared corpora "
                           f"and data checks there; set LINEAGE_CACHE to a folder this user can write, or fix "
                           f"{existing}")


def bounded(texts: Iterable[str], limit: int | None) -> Iterator[str]:
    """`texts` up to `limit` characters in all: every text that starts within the limit, whole (None: all)."""
    read = 0
    for text in texts:
        if limit is not None and read >= limit:
            return
        read += len(text)
        yield text


def reused_or_trained(family: str, texts: Callable[[], Iterable[str]], vocab_size: int, *, sample_size: int | None,
                      model_max_length: int, data_key: str | None = None) -> PreTrainedTokenizerFast:
    """A tokenizer of `family` trained on the first `sample_size` characters of `texts()` (`bounded`), or the one
    trained on exactly those texts before, from `cache_folder()/tokenizers/<key>`: the key hashes the training
    settings and the tokenizers release with `data_key` when given (what identifies data read from files: their
    fingerprint, so nothing is read to find the tokenizer), else with the sampled texts themselves (a first read of
    the sample), so a tokenizer is reused only where training would give the same one. A new one is written into
    the cache through a temporary folder and a rename; a damaged entry is trained again."""
    import tokenizers

    if data_key is None:
        digest, characters, count = hashlib.sha256(), 0, 0
        for text in bounded(texts(), sample_size):
            digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
            characters, count = characters + len(text), count + 1
        identity, same = digest.hexdigest(), f"the same {count} texts, {characters:,} characters"
    else:
        identity, same = f"data {data_key} {sample_size}", "the same data"
    settings = f"{canonical_family(family)} {vocab_size} {model_max_length} {tokenizers.__version__}"
    key = hashlib.sha256(f"{settings} {identity}".encode()).hexdigest()[:24]
    folder = cache_folder(writing=True) / "tokenizers" / key
    if (folder / "tokenizer.json").is_file():
        try:
            tokenizer = load_tokenizer(folder, family)
        except (OSError, ValueError):
            tokenizer = None  # a damaged entry: trained again below
        if tokenizer is not None:
            print(f"tokenizer: reused {folder} (trained on {same})", flush=True)
            return tokenizer
    read = [0, 0]  # texts, characters

    def sample() -> Iterator[str]:
        for text in bounded(texts(), sample_size):
            read[0], read[1] = read[0] + 1, read[1] + len(text)
            yield text

    tokenizer = train_tokenizer(family, sample(), vocab_size, model_max_length=model_max_length)
    with staged(folder) as staging:
        tokenizer.save_pretrained(staging)
    count, characters = read
    cut = f"the first {count} texts ({characters:,} characters, tokenizer_train_size)" if (
        sample_size is not None and characters >= sample_size) else f"all {count} texts ({characters:,} characters)"
    print(f"tokenizer: trained on {cut}; kept in {folder} for the next run on the same data", flush=True)
    return tokenizer


class _CountingIterator:
    """Pass texts through to the trainer while counting the non-empty ones."""

    def __init__(self, texts: Iterable[str]):
        self.texts, self.nonempty = texts, 0

    def __iter__(self):
        for text in self.texts:
            if text and text.strip():
                self.nonempty += 1
                yield text


def _check_backend_specials(family: str, backend: Tokenizer) -> None:
    missing = [t for t in _SPECIALS[family] if backend.token_to_id(t) is None]
    if missing:
        raise MissingSpecialTokenError(f"the {family} tokenizer vocabulary lacks the special token(s) "
                                       f"{' '.join(missing)}; a {family} tokenizer needs {' '.join(_SPECIALS[family])}")


def check_special_tokens(tokenizer: PreTrainedTokenizerFast, family: str, source: str | None = None) -> None:
    """Raise ``MissingSpecialTokenError`` unless every special token of ``family`` is set and in the
    vocabulary (checked for tokenizers a user brings, e.g. a Hub BERT tokenizer for MLM)."""
    family = canonical_family(family)
    where = f"tokenizer {source}" if source else "the tokenizer"
    vocab = tokenizer.get_vocab()
    for role, default in _ROLES[family].items():
        token = getattr(tokenizer, role, None)
        if token is None:
            raise MissingSpecialTokenError(f"{where} has no {role} (a {family} model needs one, e.g. {default!r})")
        if str(token) not in vocab:
            raise MissingSpecialTokenError(f"{where}: {role} {str(token)!r} is not in its vocabulary")
    for token in _SPECIALS[family]:
        if token not in _ROLES[family].values() and token not in vocab:
            raise MissingSpecialTokenError(f"{where} lacks the special token {token!r}, which the {family} "
                                           f"templates need ({' '.join(_SPECIALS[family])})")


def check_not_a_file(path_or_name: str | Path, argument: str = "tokenizer") -> None:
    """Refuse a file (``tok/tokenizer.json``) where a tokenizer folder belongs, naming ``argument`` and the folder to
    give. A file alone is not loaded: ``tokenizer.json`` holds the vocabulary and the templates, but the special-token
    roles, ``padding_side`` and ``model_max_length`` live in ``tokenizer_config.json`` beside it."""
    path = Path(path_or_name)
    if not path.is_file():
        return
    folder = path.parent
    if (folder / "tokenizer_config.json").is_file() and (folder / "tokenizer.json").is_file():
        give = f"give its folder {str(folder)!r}"
    else:
        give = "give the folder that save_pretrained or python -m train.train_tokenizer wrote"
    raise TokenizerPathError(f"{argument} {str(path)!r} is a file; a tokenizer is loaded from the folder that holds it "
                             f"(tokenizer.json with tokenizer_config.json, which names its special tokens): {give}")


# a folder of vocabulary files alone, as `tokenizers`' save_model writes them: the transformers class that reads them
VOCABULARY_FILES = {("vocab.txt",): ("BertTokenizer", "a WordPiece", ", do_lower_case=True",
                                     " (do_lower_case=False for a cased vocabulary)"),
                    ("merges.txt", "vocab.json"): ("GPT2Tokenizer", "a byte-level BPE", "", "")}


def check_vocabulary_files(path_or_name: str | Path, argument: str = "tokenizer") -> None:
    """Refuse, naming ``argument``, a folder of vocabulary files alone (``vocab.txt``; ``vocab.json`` and
    ``merges.txt``) with nothing that names the class to read them (``tokenizer_config.json``, ``config.json``),
    which ``AutoTokenizer`` cannot load: the line that saves it as a tokenizer folder."""
    folder = Path(path_or_name)
    if not folder.is_dir() or any((folder / name).is_file() for name in (
            "tokenizer.json", "tokenizer_config.json", "config.json")):
        return
    names = tuple(sorted(p.name for p in folder.iterdir() if p.name in ("vocab.txt", "vocab.json", "merges.txt")))
    if names not in VOCABULARY_FILES:
        return
    cls, kind, lower, note = VOCABULARY_FILES[names]
    raise TokenizerPathError(
        f"{argument}: folder {str(folder)!r} holds {' and '.join(names)} alone, {kind} vocabulary as tokenizers' "
        f"save_model writes it, with no tokenizer_config.json to name the tokenizer that reads it: save it as a "
        f"tokenizer folder, e.g. python -c \"from transformers import {cls}; {cls}.from_pretrained('{folder}'"
        f"{lower}).save_pretrained('{folder}')\"{note}")


def only_special_tokens(tokenizer) -> bool:
    """Whether every token of the vocabulary is a special token: transformers 5.24's ``AutoTokenizer`` builds such a
    tokenizer for a checkpoint folder without tokenizer files (a BERT folder gives ``[PAD] [UNK] [CLS] [SEP] [MASK]``),
    and every word it reads becomes its unknown token."""
    special = {str(t) for t in tokenizer.all_special_tokens}
    special |= {str(t) for t in tokenizer.added_tokens_decoder.values() if t.special}
    return set(tokenizer.get_vocab()) <= special


def check_vocabulary(tokenizer, where: str, remedy: str) -> None:
    """Refuse a tokenizer of special tokens only (``only_special_tokens``): ``EmptyVocabularyError`` naming ``where``
    and ``remedy``."""
    if not only_special_tokens(tokenizer):
        return
    vocab = tokenizer.get_vocab()
    listed = " ".join(sorted(vocab, key=vocab.get))
    raise EmptyVocabularyError(f"{where} holds only its {len(vocab)} special tokens ({listed}) and no vocabulary: "
                               f"every word would become {tokenizer.unk_token or 'no token at all'}; {remedy}")


def load_tokenizer(path_or_name: str | Path, family: str | None = None, argument: str = "tokenizer",
                   **kwargs) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained`` plus ``check_vocabulary`` and, when ``family`` is given,
    ``check_special_tokens``; a file where the folder belongs is refused naming ``argument`` (``check_not_a_file``)."""
    check_not_a_file(path_or_name, argument)
    check_vocabulary_files(path_or_name, argument)
    tokenizer = AutoTokenizer.from_pretrained(str(path_or_name), **kwargs)
    check_vocabulary(tokenizer, f"{argument} {str(path_or_name)!r}",
                     "give (--tokenizer FOLDER) the folder that save_pretrained or python -m train.train_tokenizer "
                     "wrote: tokenizer.json, or its class's vocabulary files (vocab.txt, vocab.json with merges.txt)")
    if family is not None:
        check_special_tokens(tokenizer, family, source=str(path_or_name))
    return tokenizer


def config_kwargs_from_tokenizer(tokenizer: PreTrainedTokenizerFast, family: str) -> dict[str, int]:
    """Token ids and vocabulary size for a model config built to match ``tokenizer``."""
    family = canonical_family(family)
    check_special_tokens(tokenizer, family)
    out = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    if family == "gpt":
        out.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if family == "seq2seq":
        out.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   decoder_start_token_id=tokenizer.bos_token_id)
    return out


class TokenizerMismatchError(ValueError):
    """The tokenizer produces ids the model has no embedding for."""


# ----------------------------------------------------------------------------- checks and building blocks

def vocabulary_mismatch(chosen, own, vocab_size: int) -> str | None:
    """Why `chosen` is not the tokenizer of a checkpoint whose own tokenizer is `own` (None: it has none, or `chosen`
    is it) and whose embedding has `vocab_size` rows: a vocabulary larger than the rows, not counting the tokens added
    to it (which get rows of their own: `train.setup.models.fit_embeddings`), or a token of `own` with another id or
    missing."""
    if chosen.vocab_size > vocab_size:
        return (f"its vocabulary holds {chosen.vocab_size} tokens, not counting those added to it, for {vocab_size} "
                "embedding rows (vocab_size)")
    if own is None:
        return None
    theirs, ours = own.get_vocab(), chosen.get_vocab()
    differ = [t for t, i in theirs.items() if ours.get(t) != i]
    return (f"{len(differ)} of its {len(theirs)} tokens have another id or are missing (e.g. "
            f"{', '.join(map(repr, differ[:3]))})" if differ else None)


def check_tokenizer_matches_model(tokenizer, config) -> None:
    """Raise `TokenizerMismatchError` if any id the tokenizer can produce is outside the model's vocabulary."""
    vocab = len(tokenizer)
    if vocab > config.vocab_size:
        raise TokenizerMismatchError(
            f"the tokenizer has {vocab} tokens but the model's vocab_size is {config.vocab_size}: ids "
            f"{config.vocab_size}..{vocab - 1} have no embedding; train the tokenizer with vocab_size <= "
            f"{config.vocab_size} or build the model from the tokenizer")
    outside = {t: i for t, i in zip(tokenizer.all_special_tokens, tokenizer.all_special_ids)
               if i is None or i >= config.vocab_size}
    if outside:
        raise TokenizerMismatchError(f"special token ids outside the model's vocabulary ({config.vocab_size}): "
                                     f"{outside}")
    pad = getattr(config, "pad_token_id", None)
    if pad is not None and tokenizer.pad_token_id is not None and pad != tokenizer.pad_token_id:
        raise TokenizerMismatchError(f"the model's pad_token_id is {pad} but the tokenizer pads with "
                                     f"{tokenizer.pad_token!r} = {tokenizer.pad_token_id}")


__all__ = ["FAMILIES", "BERT_SPECIAL_TOKENS", "GPT_SPECIAL_TOKENS", "SEQ2SEQ_SPECIAL_TOKENS", "END_OF_TEXT",
           "MissingSpecialTokenError", "VocabularySizeError", "canonical_family", "special_token_names",
           "minimum_vocab_size", "train_tokenizer", "wrap_tokenizer", "check_special_tokens",
           "load_tokenizer", "config_kwargs_from_tokenizer", "TokenizerMismatchError", "check_tokenizer_matches_model",
           "TokenizerPathError", "check_not_a_file", "EmptyVocabularyError", "check_vocabulary", "only_special_tokens",
           "CacheFolderError", "cache_folder", "install_template", "complete_for_family",
           "vocabulary_mismatch"]
