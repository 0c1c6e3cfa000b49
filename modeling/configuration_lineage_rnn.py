"""Configuration of the RNN encoder-decoder (Sutskever et al. 2014; Cho et al. 2014) with Bahdanau et al. 2014's
additive attention or Luong et al. 2015's dot / general / concat attention and input feeding.

Defaults are Bahdanau's RNNsearch (section 4.2, appendix A). This module imports `transformers` only (it is copied
beside saved models).
"""

from .configuration_lineage_common import LineageBaseConfig

CELLS = ("gru", "lstm")
ATTENTIONS = ("none", "bahdanau", "luong-dot", "luong-general", "luong-concat")
BRIDGES = ("none", "last", "linear")


class LineageRnnConfig(LineageBaseConfig):
    """Configuration of `LineageRnnModel` and `LineageRnnForConditionalGeneration`; its fields: docs/models.md,
    "Configuration fields"."""

    model_type = "lineage-rnn"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the cache output before and from transformers 5.24
    positive_fields = ("vocab_size", "embedding_size", "hidden_size", "num_encoder_layers", "num_decoder_layers")
    probability_fields = ("hidden_dropout_prob", "label_smoothing")
    weight_token_ids = ("pad_token_id",)  # the embeddings' `padding_idx`
    metadata_token_ids = ("bos_token_id", "eos_token_id", "decoder_start_token_id")

    vocab_size: int = 30000
    embedding_size: int = 620
    hidden_size: int = 1000
    cell: str = "gru"
    num_encoder_layers: int = 1
    num_decoder_layers: int = 1
    bidirectional_encoder: bool = True
    attention: str = "bahdanau"
    maxout_size: int | None = None  # Bahdanau's deep output after pooling pairs (the paper's l); None: hidden_size
    input_feeding: bool = False
    bridge: str = "linear"
    reverse_source: bool = False
    hidden_dropout_prob: float = 0.0
    initializer_range: float = 0.1
    tie_word_embeddings: bool = False
    label_smoothing: float = 0.0
    is_encoder_decoder: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1
    pad_vocab_to_multiple_of: int | None = None

    def __post_init__(self, **kwargs):
        if kwargs.get("bidirectional_decoder"):
            raise ValueError(
                "`bidirectional_decoder` cannot be True: the decoder generates left to right; only the encoder can "
                "read both ways (`bidirectional_encoder`)."
            )
        super().__post_init__(**kwargs)

    def check_lineage_fields(self) -> None:
        """The shared checks (`LineageBaseConfig`), then the RNN's choices and their combinations."""
        for name, allowed in (("cell", CELLS), ("attention", ATTENTIONS), ("bridge", BRIDGES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {allowed}, got {getattr(self, name)!r}.")
        super().check_lineage_fields()
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.bidirectional_encoder and self.hidden_size % 2:
            raise ValueError(
                f"`hidden_size` must be even with `bidirectional_encoder=True` (the two directions split it), got "
                f"{self.hidden_size}."
            )
        if self.input_feeding and not self.attention.startswith("luong"):
            raise ValueError(
                f"`input_feeding` needs a Luong attention (`attention` in {ATTENTIONS[2:]}), got "
                f"attention={self.attention!r}."
            )
        if self.attention == "none" and self.bridge == "none":
            raise ValueError(
                "`bridge` must be 'last' or 'linear' with `attention='none'`: otherwise the decoder never sees the "
                "source."
            )
        if self.bridge != "none" and self.num_encoder_layers != self.num_decoder_layers:
            raise ValueError(
                f"`bridge={self.bridge!r}` initialises decoder layer l from encoder layer l, so `num_decoder_layers` "
                f"({self.num_decoder_layers}) must equal `num_encoder_layers` ({self.num_encoder_layers}); or set "
                "bridge='none'."
            )
        if self.maxout_size is not None and (self.attention != "bahdanau" or isinstance(self.maxout_size, bool)
                                             or not isinstance(self.maxout_size, int) or self.maxout_size < 1):
            raise ValueError(
                f"`maxout_size` is the width of Bahdanau's deep output, a positive integer with attention='bahdanau' "
                f"(None: hidden_size); got {self.maxout_size!r} with attention={self.attention!r}."
            )
        if self.tie_word_embeddings and self.embedding_size != self.output_size:
            raise ValueError(
                f"`tie_word_embeddings=True` needs `embedding_size` ({self.embedding_size}) equal to the width the "
                f"output projection reads ({self.output_size}: `hidden_size`, or `maxout_size` for Bahdanau's deep "
                f"output)."
            )

    @property
    def output_size(self) -> int:
        """Width of the decoder outputs the output projection reads."""
        return self.maxout_size or self.hidden_size


__all__ = ["ATTENTIONS", "BRIDGES", "CELLS", "LineageRnnConfig"]
