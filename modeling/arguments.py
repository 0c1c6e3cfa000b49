"""The keyword contract of every Lineage forward: the cache under the name the installed transformers uses
(`past_key_values` became `cache` in 5.24; the old name still honoured, with transformers' `FutureWarning`), and no
keyword swallowed: `@forward_arguments` refuses by name a keyword the forward does not take.
"""

import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import fields

from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import is_torchdynamo_compiling

OLD_CACHE_NAME = "past_key_values"
CACHE_NAME = "cache" if "cache" in {field.name for field in fields(BaseModelOutputWithPast)} else OLD_CACHE_NAME
OLD_CACHE_REMOVED_IN = "5.40.0"  # where transformers 5.24's classes say `past_key_values` goes

# Keywords transformers passes to a model beyond the forward's own parameters. Trainer passes `num_items_in_batch`
# (the token count of a gradient-accumulation step) only to heads whose loss takes it (`accepts_loss_kwargs`).
TRANSFORMERS_KEYWORDS = frozenset({"output_attentions", "output_hidden_states", "return_dict", "num_items_in_batch"})
# Taken where a forward names them, but left out of the signature it shows, as transformers' own forwards take them in
# `**kwargs`: Trainer counts every parameter with "label" in its name among the label names (`find_labels`), and then
# finds no labels (hence no evaluation loss) in a batch without `shift_labels`.
UNLISTED_KEYWORDS = frozenset({"shift_labels"})


def cache_keyword(cache) -> dict:
    """`{name: cache}` under the installed name, for an output class (`BaseModelOutputWithPast(**cache_keyword(c))`)
    and for a call whose callee transformers inspects by that name (`GradientCheckpointingLayer` drops the cache)."""
    return {CACHE_NAME: cache}


def output_cache(outputs):
    """The cache a model output carries, under the installed name (None when it holds none)."""
    return getattr(outputs, CACHE_NAME, None)


def encoder_decoder_cache() -> EncoderDecoderCache:
    """A new cache of a decoder with cross attention: self-attention keys/values, and those of the encoder states,
    projected once per generation. Its layers are made as they are filled (every layer attends to all positions), not
    from the config: `DynamicCache(config=)` deep-copies an encoder-decoder config for its decoder half, which
    Dynamo before torch 2.13 cannot trace, so a compiled forward with a cache would break its graph there."""
    return EncoderDecoderCache(DynamicCache(), DynamicCache())


def model_cache(model, cache, use_cache: bool | None, new_cache: Callable | None = None, packed: bool = False):
    """A forward's cache and whether it returns one: `use_cache` defaults to `config.use_cache` outside training (off
    for packed rows); a new cache (`new_cache()`, by default a `DynamicCache`) when it is on and none was given. A
    given cache is used either way, as transformers' models do."""
    if use_cache is None:
        use_cache = model.config.use_cache and not model.training and not packed
    if use_cache and cache is None:
        cache = new_cache() if new_cache is not None else DynamicCache(config=model.config)
    return cache, use_cache


def _returns_dict(model, kwargs: dict) -> bool:
    """Whether a forward given `kwargs` returns its output class, not the tuple `return_dict=False` asks for."""
    chosen = kwargs.get("return_dict")
    return getattr(model.config, "return_dict", True) if chosen is None else chosen


def forward_arguments(forward: Callable | None = None, *, strict: bool = True, takes: tuple[str, ...] = ()) -> Callable:
    """Decorate a forward whose cache parameter is named `cache`: it takes the cache as `cache` or `past_key_values`,
    shows the installed transformers' name, and (`strict`) refuses an unused keyword with a `TypeError` naming it. A
    forward that may skip its logits (`return_logits`) computes them for a tuple, whose items would move otherwise.
    `takes`: keywords it receives in `**kwargs` (those handed on to a base model, or transformers' varlen keywords)."""
    if forward is None:
        return functools.partial(forward_arguments, strict=strict, takes=takes)
    signature = inspect.signature(forward)
    parameters = signature.parameters
    names = {name for name, p in parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"self"}
    takes_cache, skips_logits = "cache" in parameters, "return_logits" in parameters
    accepted = names | TRANSFORMERS_KEYWORDS | set(takes)
    per_example = accepted - {"num_items_in_batch"}  # a per-example mean loss: no token count to divide by

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if takes_cache and OLD_CACHE_NAME in kwargs:
            if "cache" in kwargs:
                raise TypeError(f"{type(self).__name__}.{forward.__name__}() got the cache twice, as `cache` and "
                                f"`{OLD_CACHE_NAME}` (two names of one argument): pass one.")
            if CACHE_NAME != OLD_CACHE_NAME and not is_torchdynamo_compiling():
                warnings.warn(f"`{OLD_CACHE_NAME}` is deprecated and will be removed in version {OLD_CACHE_REMOVED_IN} "
                              f"for `{type(self).__name__}.{forward.__name__}`. Use `{CACHE_NAME}` instead.",
                              FutureWarning, stacklevel=2)
            kwargs["cache"] = kwargs.pop(OLD_CACHE_NAME)
        if strict:
            taken = per_example if getattr(self, "accepts_loss_kwargs", True) is False else accepted
            unused = [key for key in kwargs if key not in taken]
            if unused:
                shown = sorted(CACHE_NAME if name == "cache" else name for name in taken)
                raise TypeError(f"{type(self).__name__}.{forward.__name__}() got an unexpected keyword argument "
                                f"{unused[0]!r}; it takes {', '.join(shown)}.")
        if skips_logits and kwargs.get("return_logits") is None and not _returns_dict(self, kwargs):
            kwargs["return_logits"] = True  # a tuple keeps the reference's positions: (loss, logits, ...)
        return forward(self, *args, **kwargs)

    shown = [p.replace(name=CACHE_NAME) if name == "cache" else p for name, p in parameters.items()
             if not (strict and p.kind == p.VAR_KEYWORD) and name not in UNLISTED_KEYWORDS]
    if strict:  # what the forward takes, as transformers reads it (`generate()` hands an encoder only these)
        shown += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
                  for name in sorted((TRANSFORMERS_KEYWORDS | set(takes)) - names)]
    wrapper.__signature__ = signature.replace(parameters=shown)
    return wrapper


__all__ = ["CACHE_NAME", "OLD_CACHE_NAME", "TRANSFORMERS_KEYWORDS", "UNLISTED_KEYWORDS", "cache_keyword",
           "encoder_decoder_cache", "forward_arguments", "model_cache", "output_cache"]
