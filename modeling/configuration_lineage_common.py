"""Configuration fields and checks shared by every Lineage family.

Each family config (`configuration_lineage_<family>.py`) subclasses `LineageConfig`, overrides the defaults of
its paper, and adds its own fields. The checks here run when a config is built, so a bad value fails with a
`ValueError` naming the field and the allowed values before any weight is allocated.

This module imports `transformers` only (never torch): it is copied beside saved models.
"""

from transformers import PreTrainedConfig

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu")
NORM_POSITIONS = ("post", "pre")


class LineageConfig(PreTrainedConfig):
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
    """

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

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.check_lineage_fields()

    @classmethod
    def _lineage_bool_fields(cls) -> list[str]:
        """Fields annotated `bool` by a Lineage config class (this one or a family's)."""
        return [name for klass in cls.__mro__ if issubclass(klass, LineageConfig)
                for name, kind in vars(klass).get("__annotations__", {}).items() if kind is bool]

    def check_lineage_fields(self) -> None:
        """Raise a `ValueError` naming the first field whose value is outside its allowed range."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"`hidden_size` ({self.hidden_size}) must be divisible by `num_attention_heads` "
                f"({self.num_attention_heads}); allowed head counts divide {self.hidden_size}."
            )
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(f"`norm_position` must be one of {NORM_POSITIONS}, got {self.norm_position!r}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"`hidden_act` must be one of {ACTIVATIONS}, got {self.hidden_act!r}.")
        for name in self._lineage_bool_fields():
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}.")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be in [0, 1), got {value!r}.")


__all__ = ["ACTIVATIONS", "NORM_POSITIONS", "LineageConfig"]
