"""Configuration fields and checks shared by every Lineage family.

Each family config (`configuration_lineage_<family>.py`) subclasses `LineageConfig`, overrides the defaults of
its paper, and adds its own fields. The checks here run when a config is built, so a bad value fails with a
`ValueError` naming the field and the allowed values before any weight is allocated.

Special-token ids: those that index a weight (`weight_token_ids`: an embedding's `padding_idx`) must lie in
[0, vocab_size) always. Those that only name a token (`metadata_token_ids`: to start or end generation, to find a
position) must too when a config is built in code, but a stored config (`from_dict`: a saved folder, a reference
model being converted) keeps them as they are with a warning, as transformers does: a GPT-2 config with
`vocab_size=99` keeps GPT-2's `eos_token_id=50256`, and its model runs in transformers and in Lineage alike.

Positions: `position_embedding_type` names a family's absolute encoding (`"absolute"`, the learned table of BERT and
GPT; the Transformer's `"sinusoidal"` or `"learned"`) or relative position representations (Shaw et al. 2018,
"Self-Attention with Relative Position Representations"): `"relative"` (learned vectors for the clipped distance
added to keys and values inside self-attention) or `"relative-keys"` (keys only). Relative models have no absolute
positions unless `absolute_and_relative` is set.

This module imports `transformers` only (never torch): it is copied beside saved models.
"""

import warnings

from transformers import PreTrainedConfig

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu")
NORM_POSITIONS = ("post", "pre")
RELATIVE_POSITION_TYPES = ("relative", "relative-keys")


def check_vocab_multiple(multiple, name: str = "pad_vocab_to_multiple_of") -> None:
    """None (no padding) or a positive integer, the multiple the vocabulary rows are padded to."""
    if multiple is not None and (isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1):
        raise ValueError(f"`{name}` must be None (no padding) or a positive integer (e.g. 64), got {multiple!r}.")


class LineageBaseConfig(PreTrainedConfig):
    """The checks every Lineage config runs when it is built, the RNN's included, on the fields a family names in its
    class attributes: `positive_fields` (positive integers), `probability_fields` (in [0, 1)), `weight_token_ids` and
    `metadata_token_ids` (special-token ids, see the module docstring); every field annotated `bool` must be a bool,
    `initializer_range` a number >= 0 and `pad_vocab_to_multiple_of` None or a positive integer (see `LineageConfig`).
    A family declares the fields (`vocab_size`, `hidden_size`, `hidden_dropout_prob`, `initializer_range`,
    `pad_vocab_to_multiple_of`, ...) in its own order, which its saved `config.json` keeps.
    """

    positive_fields = ("vocab_size", "hidden_size")
    probability_fields = ("hidden_dropout_prob",)
    weight_token_ids = ()
    metadata_token_ids = ()

    def __post_init__(self, **kwargs):
        stored = kwargs.pop("_stored_config", False)  # set by `from_dict` only, never saved
        super().__post_init__(**kwargs)
        self.check_lineage_fields()
        self.check_token_ids(strict=not stored)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A stored config (`from_pretrained`, or a reference model's in `conversion.py`): special-token ids that index
        no weight keep their values, with a warning, where a config built in code refuses them."""
        return super().from_dict({**config_dict, "_stored_config": True}, **kwargs)

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
    r"""Fields common to all families. Defaults are BERT-base's; families override them.

    Args:
        vocab_size: number of tokens in the vocabulary.
        hidden_size: model width (d_model).
        num_hidden_layers: number of blocks (per stack for encoder-decoders).
        num_attention_heads: heads per attention layer; must divide `hidden_size`.
        intermediate_size: inner width of the feed-forward sublayer (d_ff).
        hidden_act: feed-forward activation, one of `relu`, `gelu` (exact erf), `gelu_new` (tanh
            approximation, as GPT-2), `silu`.
        gated_ffn: use the gated feed-forward `down(act(gate(x)) * up(x))` instead of `down(act(up(x)))`.
        hidden_dropout_prob: dropout on embeddings and on every sublayer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: longest sequence the position table covers.
        initializer_range: standard deviation of the normal initialisation.
        layer_norm_eps: LayerNorm epsilon.
        norm_position: `"post"` (`LayerNorm(x + Sublayer(x))`, the original papers) or `"pre"`
            (`x + Sublayer(LayerNorm(x))`, as GPT-2, with a final LayerNorm).
        position_embedding_type: the family's absolute encoding (`absolute_position_types`: `"absolute"` for BERT and
            GPT), `"relative"` (Shaw et al. 2018: a^K and a^V added to keys and values in every self-attention; never
            in cross-attention, as in the paper) or `"relative-keys"` (a^K only).
        max_relative_position: the clipping distance k of the relative models: distances j - i are clipped to
            [-k, k], so each self-attention layer learns 2k + 1 vectors of head size for keys (and as many for
            values), shared by its heads. Required (an integer >= 1) with `relative*`, unset otherwise.
        absolute_and_relative: with `relative*`, keep the absolute position embeddings too (the Transformer's then
            are sinusoidal, as in the paper's comparison); without it a relative model has no absolute positions.
        pad_vocab_to_multiple_of: `None` (the default) or a positive integer m: the token embedding and the output
            layer get `padded_vocab_size` = ceil(vocab_size / m) * m rows (64: GPT-2's 50257 -> 50304), so the
            output matmul has tensor-core friendly shapes. `vocab_size` stays the tokenizer's size: ids at or past
            it are refused as inputs and labels, returned logits cover the real vocabulary only (the padded columns
            are sliced off), so no softmax, loss or `generate()` ever sees a padded id. The padded rows receive no
            gradient; `to_transformers` drops them.
    """

    absolute_position_types = ("absolute",)  # the values of `position_embedding_type` that give absolute positions

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
