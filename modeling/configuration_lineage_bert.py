"""Configuration of the BERT family (Devlin et al. 2018, "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding").

Defaults are BERT-base: 12 layers, hidden 768, 12 heads, feed-forward 3072, exact-erf GELU, 512 learned
positions, 2 segment types, post-norm with LayerNorm eps 1e-12, as in the reference implementation.
`is_decoder` and `add_cross_attention` make BERT a causal decoder with cross attention, as transformers' BERT
(the bert2bert decoder of Rothe et al. 2020, "Leveraging Pre-trained Checkpoints for Sequence Generation Tasks").
"""

from .configuration_lineage_common import LineageConfig


class LineageBertConfig(LineageConfig):
    """Configuration of `LineageBertModel` and its heads; its fields: docs/models.md, "Configuration fields"."""

    model_type = "lineage-bert"
    # what `Trainer` leaves out of predictions: the cache of the decoder (its names from and before transformers 5.24),
    # the terms of the pre-training loss
    keys_to_ignore_at_inference = ["cache", "past_key_values", "mlm_loss", "nsp_loss"]
    weight_token_ids = ("pad_token_id",)  # the word embedding's `padding_idx`
    metadata_token_ids = ("bos_token_id", "eos_token_id")
    positive_fields = (*LineageConfig.positive_fields, "type_vocab_size")

    type_vocab_size: int = 2
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    classifier_dropout: float | None = None
    tie_word_embeddings: bool = True
    is_decoder: bool = False
    add_cross_attention: bool = False
    use_cache: bool = True

    def check_lineage_fields(self) -> None:
        super().check_lineage_fields()
        if self.add_cross_attention and not self.is_decoder:
            raise ValueError("`add_cross_attention=True` needs `is_decoder=True` (cross attention is a decoder's).")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"`classifier_dropout` must be None or in [0, 1), got {self.classifier_dropout!r}.")


__all__ = ["LineageBertConfig"]
