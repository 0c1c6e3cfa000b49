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
    """Configuration of `LineageGptModel` and its heads; its fields: docs/models.md, "Configuration fields"."""

    model_type = "lineage-gpt"
    # what `Trainer` leaves out of predictions: the cache (its names from and before transformers 5.24), the terms of
    # a classification head's loss
    keys_to_ignore_at_inference = ["cache", "past_key_values", "classification_loss", "lm_loss"]
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
