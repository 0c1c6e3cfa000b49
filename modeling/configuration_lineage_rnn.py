"""Configuration of the RNN encoder-decoder (Sutskever et al. 2014; Cho et al. 2014) with the attention that
preceded the Transformer: Bahdanau et al. 2014 ("Neural Machine Translation by Jointly Learning to Align and
Translate", additive attention over the previous decoder state) and Luong et al. 2015 ("Effective Approaches to
Attention-based Neural Machine Translation", dot / general / concat scores over the current state, input feeding).

Defaults are Bahdanau's RNNsearch (section 4.2, appendix A): a bidirectional GRU encoder, a GRU decoder, additive
attention, 620-dimensional embeddings, the decoder initialised through a linear layer with tanh from the encoder
(`s_0 = tanh(W_s h_1)`), a 30000-token vocabulary. Departure: the two encoder directions split `hidden_size`
(as OpenNMT's `brnn`), so annotations and decoder states have one width; RNNsearch's encoder has `hidden_size`
units per direction. Label smoothing is 0 by default (plain cross-entropy, as transformers' models); recipes set it.

Every field is checked when the config is built (`LineageBaseConfig`'s shared checks, then the RNN's choices); a bad
value raises a `ValueError` naming the field and the allowed values. This module imports `transformers` only (it is
copied beside saved models).
"""

from .configuration_lineage_common import LineageBaseConfig

CELLS = ("gru", "lstm")
ATTENTIONS = ("none", "bahdanau", "luong-dot", "luong-general", "luong-concat")
BRIDGES = ("none", "last", "linear")


class LineageRnnConfig(LineageBaseConfig):
    r"""Configuration of `LineageRnnModel` and `LineageRnnForConditionalGeneration`.

    Args:
        vocab_size: tokens in the vocabulary shared by source and target (each side has its own embedding).
        embedding_size: width of the source and target token embeddings.
        hidden_size: width of the decoder states and of the encoder annotations (split over the two directions of
            a bidirectional encoder, so it must then be even).
        cell: `"gru"` (Cho et al. 2014, as Bahdanau) or `"lstm"` (as Sutskever and Luong).
        num_encoder_layers, num_decoder_layers: stacked recurrent layers of each side.
        bidirectional_encoder: read the source forwards and backwards (Bahdanau's annotations `[h_fwd; h_bwd]`).
            The decoder generates left to right and is never bidirectional.
        attention: `"none"` (the fixed thought vector: the source reaches the decoder only through its initial
            state), `"bahdanau"` (`v^T tanh(W s_{t-1} + U h_i)`), `"luong-dot"` (`h_t^T h_i`), `"luong-general"`
            (`h_t^T W h_i`), `"luong-concat"` (`v^T tanh(W [h_t; h_i])`).
        input_feeding: feed Luong's attentional state of step t-1 into the decoder input at step t (section 3.3);
            Luong attentions only.
        bridge: how the encoder's final state initialises the decoder: `"none"` (zeros), `"last"` (copied; the
            two directions concatenated), `"linear"` (`tanh(W h)` for the hidden state, a linear map for an LSTM's
            cell). `"last"` and `"linear"` need as many decoder as encoder layers; `attention="none"` needs a bridge.
        reverse_source: feed the source to the encoder reversed (Sutskever et al. 2014, section 3.3); annotations
            and alignments are returned in the original source order.
        hidden_dropout_prob: dropout on embeddings, between stacked layers and before the output projection.
        initializer_range: weights start uniform in [-initializer_range, initializer_range] (Sutskever 0.08,
            Luong 0.1).
        tie_word_embeddings: use the target embedding as the output projection (needs embedding_size ==
            hidden_size).
        label_smoothing: epsilon of label-smoothed cross-entropy, in [0, 1); 0 is plain cross-entropy.
        pad_token_id, bos_token_id, eos_token_id, decoder_start_token_id: ids of `<pad>`, `<s>`, `</s>` and the
            first decoder input.
        use_cache: carry the recurrent state between decoding steps (`LineageRnnCache`).
        pad_vocab_to_multiple_of: `None` or m: the embeddings and the output layer get `vocab_size` rounded up to a
            multiple of m rows, as in `LineageConfig`.
    """

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
        if self.tie_word_embeddings and self.embedding_size != self.hidden_size:
            raise ValueError(
                f"`tie_word_embeddings=True` needs `embedding_size` ({self.embedding_size}) equal to `hidden_size` "
                f"({self.hidden_size}): the output projection reads hidden states."
            )


__all__ = ["ATTENTIONS", "BRIDGES", "CELLS", "LineageRnnConfig"]
