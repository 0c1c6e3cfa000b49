"""Configuration of the encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need").

Defaults are the paper's base model (table 3): 6 encoder and 6 decoder layers, d_model 512, 8 heads, d_ff 2048,
ReLU, residual dropout 0.1, a shared 37000-token vocabulary, post-norm, sinusoidal positions, embeddings scaled by
sqrt(d_model) and shared three ways (encoder input, decoder input, pre-softmax projection).

The model's `loss` is plain cross-entropy (the NLL) by default, as every transformers model's, so an evaluation
loss and a perplexity computed from it mean what they say. The paper's label smoothing of 0.1 (section 5.4) is a
training choice: the translation recipes set `label_smoothing: 0.1`, as `Trainer` has `label_smoothing_factor`.

Choices the paper leaves open or that other implementations make differently, all by config: learned instead of
sinusoidal positions (section 3.5 reports both), Marian's split sin|cos position layout, pre-norm, an untied output
projection, a fixed bias added to the logits (Marian's `final_logits_bias`), attention dropout (0 by default: the
paper only drops sublayer outputs and embedding sums). LayerNorm eps defaults to 1e-5 (PyTorch's, and Marian's).

Decoding as in the paper (section 6.1) is `generate(num_beams=4, length_penalty=0.6)`; generation settings live
in `model.generation_config`, not here.
"""

from .configuration_lineage_common import LineageConfig

SINUSOIDAL_LAYOUTS = ("interleaved", "split")


class LineageTransformerConfig(LineageConfig):
    r"""Configuration of `LineageTransformerModel` and `LineageTransformerForConditionalGeneration`.

    Args (besides those of `LineageConfig`; `num_hidden_layers` counts the layers of each stack):
        position_embedding_type: `"sinusoidal"` (section 3.5) or `"learned"` (one table per stack), the absolute
            encodings; or `"relative"` / `"relative-keys"` (Shaw et al. 2018, see `LineageConfig`) in the encoder's
            and the decoder's self-attention, never in cross-attention.
        sinusoidal_layout: `"interleaved"` (sin on even, cos on odd dimensions, as the paper writes it) or
            `"split"` (all sin features, then all cos features, as Marian).
        scale_embedding: multiply token embeddings by sqrt(hidden_size) (section 3.4).
        label_smoothing: epsilon of label-smoothed cross-entropy (section 5.4), in [0, 1); 0.0 (the default) gives
            plain cross-entropy. The paper trains with 0.1, which the translation recipes set.
        final_logits_bias: add a fixed (non-trained) per-token bias buffer to the logits, as Marian does.
        tie_word_embeddings: use the shared token embedding as the pre-softmax projection (section 3.4).
        pad_token_id, bos_token_id, eos_token_id: ids of `<pad>`, `<s>`, `</s>`.
        decoder_start_token_id: first decoder input, in training (labels shifted right) and in generation.
        use_cache: keep self- and cross-attention keys and values between decoding steps.
    """

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
