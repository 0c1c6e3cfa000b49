"""Configuration of the GPT family (Radford et al. 2018, "Improving Language Understanding by Generative
Pre-Training"; Radford et al. 2019, "Language Models are Unsupervised Multitask Learners" for the pre-norm
variant).

Defaults are GPT-1: 12 layers, hidden 768, 12 heads, feed-forward 3072, 512 learned positions, a 40478-token
byte-pair vocabulary, post-norm with LayerNorm eps 1e-5, dropout 0.1, and the tanh-approximated GELU
(`gelu_new`), which is what the original code (finetune-transformer-lm) and transformers' `OpenAIGPT` call
"gelu". `norm_position="pre"` with `vocab_size=50257` and `max_position_embeddings=1024` gives GPT-2 small.
"""

from .configuration_lineage_common import LineageConfig


class LineageGptConfig(LineageConfig):
    r"""Configuration of `LineageGptModel` and its heads.

    Args (besides those of `LineageConfig`):
        pad_token_id: id of `[PAD]`. Classification heads find the `[EXTRACT]` token (the last non-padding one)
            from `attention_mask`, else from `input_ids != pad_token_id`; a batch of several rows with neither is
            refused. `None` when the vocabulary has no padding token.
        bos_token_id: id that starts generation when no prompt is given (`[START]` or the end-of-text token).
        eos_token_id: id that ends a generated sequence (the end-of-text token).
        tie_word_embeddings: tie the LM head to the token embeddings (both papers do).
        use_cache: return a key/value cache from forward passes outside training (generation).
        classifier_dropout: dropout before the classification heads; `None` uses `hidden_dropout_prob`.
        lm_loss_weight: weight of the auxiliary language-modelling loss that the classification heads add to their
            loss when labels are given (section 3.2: L3 = L2 + lambda * L1). The paper uses 0.5; the default 0.0
            trains on the classification loss alone, as transformers' sequence-classification heads do.
    """

    model_type = "lineage-gpt"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the cache output before and from transformers 5.24
    attribute_map = {**LineageConfig.attribute_map, "n_embd": "hidden_size", "n_layer": "num_hidden_layers",
                     "n_head": "num_attention_heads", "n_positions": "max_position_embeddings",
                     "n_inner": "intermediate_size"}  # the names of transformers' GPT-2 and OpenAI GPT configs
    metadata_token_ids = ("pad_token_id", "bos_token_id", "eos_token_id")

    vocab_size: int = 40478
    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 512
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = True
    classifier_dropout: float | None = None
    lm_loss_weight: float = 0.0

    def check_lineage_fields(self) -> None:
        super().check_lineage_fields()
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"`classifier_dropout` must be None or in [0, 1), got {self.classifier_dropout!r}.")
        if not isinstance(self.lm_loss_weight, (int, float)) or self.lm_loss_weight < 0:
            raise ValueError(
                f"`lm_loss_weight` must be a number >= 0 (the paper uses 0.5), got {self.lm_loss_weight!r}."
            )


__all__ = ["LineageGptConfig"]
