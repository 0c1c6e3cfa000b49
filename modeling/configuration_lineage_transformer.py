"""Configuration of the encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need").

Defaults are the paper's base model (table 3). The loss is plain cross-entropy by default; the paper's label
smoothing of 0.1 (section 5.4) is a training choice the translation recipes set. The paper decodes with a beam of 4
(section 6.1): `generate(num_beams=4)`; its length penalty is GNMT's (docs/models.md, "Departures").
"""

from .configuration_lineage_common import LineageConfig

SINUSOIDAL_LAYOUTS = ("interleaved", "split")


class LineageTransformerConfig(LineageConfig):
    """Configuration of `LineageTransformerModel` and `LineageTransformerForConditionalGeneration`; its fields:
    docs/models.md, "Configuration fields"."""

    model_type = "lineage-transformer"
    absolute_position_types = ("sinusoidal", "learned")
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the cache output before and from transformers 5.24
    attribute_map = {**LineageConfig.attribute_map, "h": "num_attention_heads", "N": "num_hidden_layers"}  # table 3
    weight_token_ids = ("pad_token_id",)  # the shared embedding's `padding_idx`
    metadata_token_ids = ("bos_token_id", "eos_token_id", "decoder_start_token_id")
    probability_fields = (*LineageConfig.probability_fields, "label_smoothing")

    vocab_size: int = 37000
    hidden_size: int = 512
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "relu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    layer_norm_eps: float = 1e-5
    position_embedding_type: str = "sinusoidal"
    sinusoidal_layout: str = "interleaved"
    scale_embedding: bool = True
    label_smoothing: float = 0.0
    final_logits_bias: bool = False
    tie_word_embeddings: bool = True
    is_encoder_decoder: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1

    def check_lineage_fields(self) -> None:
        super().check_lineage_fields()
        if self.sinusoidal_layout not in SINUSOIDAL_LAYOUTS:
            raise ValueError(
                f"`sinusoidal_layout` must be one of {SINUSOIDAL_LAYOUTS}, got {self.sinusoidal_layout!r}."
            )


__all__ = ["LineageTransformerConfig"]
