"""Configuration fields and checks shared by every Lineage family; a bad value fails with a `ValueError` naming the
field and the allowed values before any weight is allocated.

Special-token ids that index a weight (`weight_token_ids`) must lie in [0, vocab_size); those that only name a token
(`metadata_token_ids`) must too in a config built in code, while a stored config (`from_dict`) keeps them with a
warning, as transformers does. Fields also go by other names (`attribute_map`: `d_model`, `d_ff`, `num_heads`, ...).

This module imports `transformers` only (never torch): it is copied beside saved models.
"""

import re
import warnings
from functools import cache

from transformers import GenerationConfig, PreTrainedConfig

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu")
NORM_POSITIONS = ("post", "pre")
RELATIVE_POSITION_TYPES = ("relative", "relative-keys")
SIZE_KEYWORD = re.compile(r"^(num|n|d)_|_(size|dim|dims)$")  # how a keyword that names a size reads
HEAD_SIZES = ("d_k", "d_v", "head_dim")  # hidden_size / num_attention_heads in every attention family


@cache
def keywords_not_sizes() -> frozenset[str]:
    """Keywords that read like sizes but are none: transformers' `num_labels` and the generation settings, which
    transformers takes out of a config's keywords itself."""
    return frozenset({"num_labels", *GenerationConfig().to_dict()})


def check_vocab_multiple(multiple, name: str = "pad_vocab_to_multiple_of") -> None:
    """None (no padding) or a positive integer, the multiple the vocabulary rows are padded to."""
    if multiple is not None and (isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1):
        raise ValueError(f"`{name}` must be None (no padding) or a positive integer (e.g. 64), got {multiple!r}.")


class LineageBaseConfig(PreTrainedConfig):
    """The checks every Lineage config runs when built, on the fields its class attributes name: `positive_fields`,
    `probability_fields` (in [0, 1)), `weight_token_ids` and `metadata_token_ids`; `bool` fields, `initializer_range`
    and `pad_vocab_to_multiple_of` too. A family declares its fields in the order its `config.json` keeps."""

    positive_fields = ("vocab_size", "hidden_size")
    probability_fields = ("hidden_dropout_prob",)
    weight_token_ids = ()
    metadata_token_ids = ()

    def __post_init__(self, **kwargs):
        stored = kwargs.pop("_stored_config", False)  # set by `from_dict` only, never saved
        self.check_size_keywords(kwargs, strict=not stored)
        self.check_other_names(kwargs)
        super().__post_init__(**kwargs)
        self.check_lineage_fields()
        self.check_token_ids(strict=not stored)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A stored config: special-token ids that index no weight kept with a warning; a field stored beside one of its
        other names (`attribute_map`) keeps the field's value."""
        stored = dict(config_dict)
        for alias, field in cls.attribute_map.items():
            if alias in stored and field in stored and stored.pop(alias) != stored[field]:
                warnings.warn(f"the stored config has `{field}`={stored[field]!r} and `{alias}`="
                              f"{config_dict[alias]!r}, another name for it that earlier releases ignored: `{alias}` "
                              f"is dropped, the model keeps `{field}`={stored[field]!r}.", stacklevel=2)
        return super().from_dict({**stored, "_stored_config": True}, **kwargs)

    def check_size_keywords(self, keywords: dict, strict: bool = True) -> None:
        """Refuse a keyword no field takes that reads like a size (`num_*`, `n_*`, `d_*`, `*_size`, `*_dim`), which
        would be kept unread (a stored config keeps it with a warning)."""
        unknown = [key for key in keywords if SIZE_KEYWORD.search(key) and key not in self.attribute_map
                   and key not in keywords_not_sizes()]
        if not unknown:
            return
        others = ", ".join(f"{alias} ({field})" for alias, field in self.attribute_map.items())
        message = (f"{type(self).__name__} has no field {', '.join(f'`{key}`' for key in unknown)}: the model would be "
                   f"built without it. Its sizes are {', '.join(self.positive_fields)}"
                   + (f"; other names it takes: {others}." if others else "."))
        if strict:
            raise ValueError(message)
        warnings.warn(f"{message} Kept as stored, unused.", stacklevel=3)

    def check_other_names(self, keywords: dict) -> None:
        """A field and another name for it (`attribute_map`) given with different values: refused naming both (a field
        left at its default gives way to the other name)."""
        given: dict[str, dict[str, object]] = {}
        for alias in keywords.keys() & self.attribute_map.keys():
            given.setdefault(self.attribute_map[alias], {})[alias] = keywords[alias]
        for field, aliases in given.items():
            current = self.__dict__[field]
            if current != self.__dataclass_fields__[field].default:
                aliases = {field: current, **aliases}
            if len(set(map(repr, aliases.values()))) > 1:
                raise ValueError(f"`{field}` given twice with different values, under its names "
                                 + ", ".join(f"{name}={value!r}" for name, value in aliases.items()) + ": give one.")

    def check_token_ids(self, strict: bool = True) -> None:
        """Every id of `weight_token_ids` and `metadata_token_ids` None or in [0, vocab_size) (`eos_token_id` may list
        several); out-of-range metadata ids only warn when not `strict`."""
        for name in self.weight_token_ids + self.metadata_token_ids:
            value = getattr(self, name)
            ids = value if isinstance(value, (list, tuple)) else [value]
            if value is None or all(type(i) is int and 0 <= i < self.vocab_size for i in ids):
                continue
            message = f"`{name}` must be None or in [0, {self.vocab_size}) (vocab_size), got {value!r}."
            if strict or name in self.weight_token_ids:
                raise ValueError(message)
            warnings.warn(f"{message} Kept as stored: it indexes no weight, but generating with it (or, for a pad "
                          "id, finding padding by it) cannot work.", stacklevel=2)

    @classmethod
    def _lineage_bool_fields(cls) -> list[str]:
        """Fields annotated `bool` by a Lineage config class (this one or a family's)."""
        return [name for klass in cls.__mro__ if issubclass(klass, LineageBaseConfig)
                for name, kind in vars(klass).get("__annotations__", {}).items() if kind is bool]

    def check_lineage_fields(self) -> None:
        """Raise a `ValueError` naming the first field whose value is outside its allowed range."""
        for name in self.positive_fields:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        for name in self._lineage_bool_fields():
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}.")
        for name in self.probability_fields:
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be in [0, 1), got {value!r}.")
        if isinstance(self.initializer_range, bool) or not isinstance(self.initializer_range, (int, float)) \
                or not self.initializer_range >= 0:
            raise ValueError(f"`initializer_range` must be a number >= 0 (the scale of the initial weights), "
                             f"got {self.initializer_range!r}.")
        check_vocab_multiple(self.pad_vocab_to_multiple_of)

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the token embedding and the output layer: `vocab_size` rounded up to `pad_vocab_to_multiple_of`."""
        multiple = self.pad_vocab_to_multiple_of or 1
        return -(-self.vocab_size // multiple) * multiple


class LineageConfig(LineageBaseConfig):
    """Fields common to all families (defaults are BERT-base's; families override them); each field: docs/models.md,
    "Configuration fields"."""

    absolute_position_types = ("absolute",)  # the values of `position_embedding_type` that give absolute positions
    # the papers' and other libraries' names of the fields, read and written through (as T5's and Marian's configs)
    attribute_map = {"d_model": "hidden_size", "d_ff": "intermediate_size", "num_heads": "num_attention_heads",
                     "num_layers": "num_hidden_layers"}

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    gated_ffn: bool = False
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    norm_position: str = "post"
    position_embedding_type: str = "absolute"
    max_relative_position: int | None = None
    absolute_and_relative: bool = False
    pad_vocab_to_multiple_of: int | None = None

    positive_fields = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                       "max_position_embeddings")
    probability_fields = ("hidden_dropout_prob", "attention_probs_dropout_prob")

    def __post_init__(self, **kwargs):
        head_sizes = {name: kwargs.pop(name) for name in HEAD_SIZES if name in kwargs}
        super().__post_init__(**kwargs)
        self.check_head_sizes(head_sizes, strict=not kwargs.get("_stored_config", False))

    def check_head_sizes(self, head_sizes: dict, strict: bool = True) -> None:
        """The paper's `d_k` and `d_v` (and `head_dim`) are hidden_size / num_attention_heads here, not fields: taken
        when they agree, refused naming them otherwise (a stored config keeps its fields, with a warning)."""
        size = self.hidden_size // self.num_attention_heads
        wrong = {name: value for name, value in head_sizes.items() if value != size}
        if not wrong:
            return
        message = (f"{', '.join(f'`{name}`={value!r}' for name, value in wrong.items())}: the head size is "
                   f"hidden_size / num_attention_heads = {self.hidden_size} / {self.num_attention_heads} = {size}, "
                   "not a field of its own; set hidden_size and num_attention_heads for the head size you want.")
        if strict:
            raise ValueError(message)
        warnings.warn(f"{message} The stored config keeps {size}.", stacklevel=3)

    def check_lineage_fields(self) -> None:
        """The shared checks (`LineageBaseConfig`), then those of the attention families' fields."""
        super().check_lineage_fields()
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"`hidden_size` ({self.hidden_size}) must be divisible by `num_attention_heads` "
                f"({self.num_attention_heads}); allowed head counts divide {self.hidden_size}."
            )
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(f"`norm_position` must be one of {NORM_POSITIONS}, got {self.norm_position!r}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"`hidden_act` must be one of {ACTIVATIONS}, got {self.hidden_act!r}.")
        if isinstance(self.layer_norm_eps, bool) or not isinstance(self.layer_norm_eps, (int, float)) \
                or not self.layer_norm_eps > 0:
            raise ValueError(f"`layer_norm_eps` must be a positive number (e.g. 1e-12), got {self.layer_norm_eps!r}.")
        self.check_position_fields()

    @property
    def relative_attention(self) -> str | None:
        """`"relative"`, `"relative-keys"` or None (absolute positions only)."""
        return self.position_embedding_type if self.position_embedding_type in RELATIVE_POSITION_TYPES else None

    @property
    def uses_absolute_positions(self) -> bool:
        """Whether the model adds absolute position embeddings to its inputs."""
        return self.relative_attention is None or self.absolute_and_relative

    def check_position_fields(self) -> None:
        kind, k = self.position_embedding_type, self.max_relative_position
        if kind not in self.absolute_position_types + RELATIVE_POSITION_TYPES:
            raise ValueError(
                f"`position_embedding_type` must be one of {self.absolute_position_types} (absolute positions) or "
                f"{RELATIVE_POSITION_TYPES} (relative positions, Shaw et al. 2018), got {kind!r}."
            )
        if self.relative_attention is None:
            if k is not None or self.absolute_and_relative:
                raise ValueError(
                    "`max_relative_position` and `absolute_and_relative` apply to `position_embedding_type` "
                    f"{RELATIVE_POSITION_TYPES} only; got max_relative_position={k!r}, "
                    f"absolute_and_relative={self.absolute_and_relative!r} with {kind!r}."
                )
        elif isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(
                f"`max_relative_position` (the clipping distance k) must be an integer >= 1 with "
                f"`position_embedding_type`={kind!r}, got {k!r}."
            )


__all__ = ["ACTIVATIONS", "NORM_POSITIONS", "RELATIVE_POSITION_TYPES", "LineageBaseConfig", "LineageConfig",
           "check_vocab_multiple"]
