"""The RNN encoder-decoder and the attention that came before the Transformer, with `generate()`.

- Sutskever et al. 2014 / Cho et al. 2014 (`attention="none"`): the source squeezed into the encoder's final state,
  which initialises the decoder (`bridge`); `reverse_source` reads the source backwards.
- Bahdanau et al. 2014 (`"bahdanau"`, RNNsearch): the previous decoder state scored against every annotation,
  `e_ti = v^T tanh(W s_{t-1} + U h_i)`; the context enters the recurrent step; a maxout deep output (appendix A.2.2).
- Luong et al. 2015 (`"luong-dot" | "luong-general" | "luong-concat"`): the current state scored, the prediction
  reads `h~_t = tanh(W_c [c_t; h_t])`, which input feeding (section 3.3) hands to the next step.

The encoder runs `nn.GRU` / `nn.LSTM` over packed sequences, the decoder the whole target in one call where the
architecture allows, else one step per position; under `torch.compile` the cells run position by position. Shapes:
B batch, S source length, T target length (of this call), E embedding size, C hidden size, L layers, V vocabulary.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from transformers.cache_utils import Cache
from transformers.initialization import uniform_, zeros_
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
from transformers.utils import ModelOutput

from .arguments import CACHE_NAME, cache_keyword, forward_arguments
from .checks import check_ids_or_embeds, check_mask_shape, require
from .configuration_lineage_rnn import LineageRnnConfig
from .layout import SequenceLayout
from .linear import LineageLinear
from .packing import PackedSequences
from .pretrained import LineageGenerationMixin, LineagePreTrainedModel
from .seq2seq import Seq2SeqBase, Seq2SeqLMBase, check_decoder_inputs

State = tuple[torch.Tensor, ...]  # (h,) for a GRU, (h, c) for an LSTM; each (L, B, C)


# ----------------------------------------------------------------------------------------------------------
# Outputs, cache, helpers
# ----------------------------------------------------------------------------------------------------------


@dataclass
class LineageRnnEncoderOutput(ModelOutput):
    """The encoder's annotations (B, S, C) and its final state per layer, batch first (B, L, C) so that `generate()`
    can expand them per beam; `final_cell` only for an LSTM."""

    last_hidden_state: torch.Tensor | None = None
    final_hidden: torch.Tensor | None = None
    final_cell: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class LineageRnnCache(Cache):
    """What the decoder carries from one generation step to the next: the recurrent state, Luong's input-feeding
    vector and the projected annotations; beam search reorders all three along the batch."""

    is_compileable = False
    is_croppable = False

    def __init__(self):
        super().__init__(layers=[])
        self.state: State | None = None  # (L, B, C) each
        self.feed: torch.Tensor | None = None  # (B, C)
        self.keys: torch.Tensor | None = None  # (B, S, K)
        self.seen_tokens = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seen_tokens={self.seen_tokens})"

    @property
    def is_initialized(self) -> bool:
        return self.state is not None

    @property
    def batch_size(self) -> int:
        return self.state[0].shape[1] if self.state is not None else -1

    def store(self, state: State, feed: torch.Tensor | None, keys: torch.Tensor | None, new_tokens: int) -> None:
        self.state, self.feed, self.keys = state, feed, keys
        self.seen_tokens += new_tokens

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    def _select(self, select) -> None:
        """Apply `select(tensor, batch_dim)` to every tensor held."""
        if self.state is not None:
            self.state = tuple(select(s, 1) for s in self.state)
        self.feed = select(self.feed, 0) if self.feed is not None else None
        self.keys = select(self.keys, 0) if self.keys is not None else None

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._select(lambda t, dim: t.index_select(dim, indices.to(t.device)))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row i continues the hypothesis in row `beam_idx[i]`."""
        self.batch_select_indices(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._select(lambda t, dim: t.repeat_interleave(repeats, dim=dim))

    def reset(self) -> None:
        self.state = self.feed = self.keys = None
        self.seen_tokens = 0

    def crop(self, tokens_to_remove: int) -> None:
        raise ValueError("A recurrent state cannot be cropped: it summarises every token seen so far.")


def right_padded_lengths(mask: torch.Tensor | None, shape: torch.Size, name: str) -> torch.Tensor:
    """(B,) lengths of a right-padded (B, T) mask (ones, then zeros), at least 1 each; all T without a mask."""
    if mask is None:
        return torch.full((shape[0],), shape[1], dtype=torch.long)
    lengths = mask.long().sum(-1)  # (B,)
    positions = torch.arange(shape[1], device=mask.device)[None]  # (1, T)
    require((mask.long() == (positions < lengths[:, None]).long()).all(),
            f"`{name}` must be right-padded: ones for real tokens, then zeros for padding.")
    require(lengths.min() >= 1,
            f"`{name}` must keep at least one real token per row (a recurrent state needs an input).")
    return lengths


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first `lengths[b]` positions of each row b of (B, S, ...); padding stays where it is."""
    lengths = lengths.to(x.device)[:, None]  # (B, 1)
    positions = torch.arange(x.shape[1], device=x.device)[None]  # (1, S)
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)  # (B, S)
    return x.gather(1, index.view(*index.shape, *[1] * (x.dim() - 2)).expand_as(x))


class CellSteps:
    """`nn.GRU` / `nn.LSTM`'s call, which runs `cell_rnn` for one position, under compile or with a (B, T) `mask`;
    the weights read inside the module's call, where accelerate's offload (`device_map`) has loaded them."""

    def forward(self, input, hx=None, mask: torch.Tensor | None = None):
        # the fused kernel's fixed cost dominates a single step; Dynamo traces neither it nor packed sequences
        if isinstance(input, PackedSequence) or (
                mask is None and input.shape[1] > 1 and not torch.compiler.is_compiling()):
            return super().forward(input, hx)
        outputs, state = cell_rnn(self, input, hx if isinstance(hx, tuple) else (hx,), mask)
        return outputs, state if isinstance(self, nn.LSTM) else state[0]


class LineageGRU(CellSteps, nn.GRU):
    pass


class LineageLSTM(CellSteps, nn.LSTM):
    pass


def make_rnn(config: LineageRnnConfig, input_size: int, hidden_size: int, num_layers: int,
             bidirectional: bool = False) -> nn.RNNBase:
    cell = LineageGRU if config.cell == "gru" else LineageLSTM
    dropout = config.hidden_dropout_prob if num_layers > 1 else 0.0
    return cell(input_size, hidden_size, num_layers, batch_first=True, dropout=dropout, bidirectional=bidirectional)


def run_rnn(rnn: nn.RNNBase, inputs: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
    """A stacked GRU or LSTM over (B, T, input) from `state`, the state taken and returned as a tuple."""
    outputs, new_state = rnn(inputs, state if isinstance(rnn, nn.LSTM) else state[0])
    return outputs, new_state if isinstance(new_state, tuple) else (new_state,)


def cell_rnn(rnn: nn.RNNBase, inputs: torch.Tensor, state: State,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, State]:
    """What `rnn` computes over (B, T, input) from `state` ((L * directions, B, C) each), a position and layer at a
    time; with a (B, T) bool `mask` of right-padded rows, what the kernel does over packed sequences (0 on padding)."""
    directions = 2 if rnn.bidirectional else 1
    layer_input, finals = inputs, []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            weights = [getattr(rnn, f"{name}{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            carried = tuple(s[layer * directions + direction] for s in state)  # (B, C) each
            steps = [None] * inputs.shape[1]
            for t in reversed(range(inputs.shape[1])) if direction else range(inputs.shape[1]):
                if isinstance(rnn, nn.LSTM):
                    new = torch.lstm_cell(layer_input[:, t], carried, *weights)
                else:
                    new = (torch.gru_cell(layer_input[:, t], carried[0], *weights),)
                if mask is not None:
                    real = mask[:, t, None]  # (B, 1)
                    new = tuple(torch.where(real, n, c) for n, c in zip(new, carried))
                    steps[t] = torch.where(real, new[0], 0.0)
                else:
                    steps[t] = new[0]
                carried = new
            outputs.append(torch.stack(steps, dim=1))  # (B, T, C)
            finals.append(carried)
        layer_input = torch.cat(outputs, dim=-1) if directions == 2 else outputs[0]  # (B, T, directions * C)
        if layer < rnn.num_layers - 1:
            layer_input = nn.functional.dropout(layer_input, rnn.dropout, rnn.training)
    return layer_input, tuple(torch.stack(parts) for parts in zip(*finals))  # (L * directions, B, C) each


def alignment(scores: torch.Tensor, source_mask: torch.Tensor) -> torch.Tensor:
    """a_ti = softmax_i(e_ti) over real source positions: (B, T, S) scores, (B, S) bool mask -> (B, T, S) weights,
    exactly 0 on padding."""
    scores = scores.masked_fill(~source_mask[:, None, :], torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1)


# ----------------------------------------------------------------------------------------------------------
# Scores: each projects the annotations once (`project`), then scores queries against them
# ----------------------------------------------------------------------------------------------------------


class DotScore(nn.Module):
    """Luong dot: score(h_t, h_i) = h_t^T h_i."""

    def project(self, annotations: torch.Tensor) -> torch.Tensor:
        return annotations  # (B, S, C)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return queries @ keys.transpose(1, 2)  # (B, T, C) x (B, C, S) -> (B, T, S)


class GeneralScore(DotScore):
    """Luong general: score(h_t, h_i) = h_t^T W_a h_i, with W_a h_i computed once per source."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.key_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def project(self, annotations: torch.Tensor) -> torch.Tensor:
        return self.key_proj(annotations)  # (B, S, C)


class AdditiveScore(nn.Module):
    """Bahdanau: e_ti = v^T tanh(W s_{t-1} + U h_i). Luong concat: v^T tanh(W_a [h_t; h_i]), the same function
    with W_a split into its query and annotation blocks. U h_i is computed once per source."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.query_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W
        self.key_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # U
        self.energy = nn.Linear(hidden_size, 1, bias=False)  # v

    def project(self, annotations: torch.Tensor) -> torch.Tensor:
        return self.key_proj(annotations)  # (B, S, C)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        energies = torch.tanh(self.query_proj(queries)[:, :, None] + keys[:, None])  # (B, T, S, C)
        return self.energy(energies).squeeze(-1)  # (B, T, S)


SCORES = {"bahdanau": AdditiveScore, "luong-dot": lambda size: DotScore(), "luong-general": GeneralScore,
          "luong-concat": AdditiveScore}


# ----------------------------------------------------------------------------------------------------------
# Encoder, bridge, decoders
# ----------------------------------------------------------------------------------------------------------


class LineageRnnEncoder(nn.Module):
    """Source embeddings, then a (bidirectional) stacked GRU/LSTM over packed sequences: (B, S) ids -> (B, S, C)
    annotations (zeros on padding) and the final state of every layer."""

    def __init__(self, config: LineageRnnConfig):
        super().__init__()
        self.config = config
        directions = 2 if config.bidirectional_encoder else 1
        self.embed_tokens = nn.Embedding(config.padded_vocab_size, config.embedding_size,
                                         padding_idx=config.pad_token_id)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.rnn = make_rnn(config, config.embedding_size, config.hidden_size // directions,
                            config.num_encoder_layers, config.bidirectional_encoder)

    def final_layers(self, state: torch.Tensor) -> torch.Tensor:
        """(L * directions, B, C / directions) as the kernel returns it -> (B, L, C), the directions concatenated."""
        layers, batch = self.config.num_encoder_layers, state.shape[1]
        state = state.view(layers, -1, batch, state.shape[-1])  # (L, directions, B, C / directions)
        return state.permute(2, 0, 1, 3).reshape(batch, layers, self.config.hidden_size)

    @forward_arguments
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        packed_sequences: PackedSequences | None = None,
        **kwargs,
    ) -> LineageRnnEncoderOutput:
        """`packed_sequences`: the collate's source rows, whose lengths it knows on the host: the kernel's packed
        sequences take them as they are (`SequenceLayout.host_lengths`), not copied back from the device."""
        shape = check_ids_or_embeds(input_ids, inputs_embeds, self.config.vocab_size,
                                    width=self.config.embedding_size)
        check_mask_shape(attention_mask, shape)
        lengths = right_padded_lengths(attention_mask, shape, "attention_mask")  # (B,)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, E)
        embedded = self.dropout(inputs_embeds)
        ordered = reverse_padded(embedded, lengths) if self.config.reverse_source else embedded
        if torch.compiler.is_compiling():  # TorchDynamo traces neither packed sequences nor the fused kernel
            directions = 2 if self.config.bidirectional_encoder else 1
            zeros = ordered.new_zeros(self.config.num_encoder_layers * directions, shape[0], self.rnn.hidden_size)
            mask = attention_mask.bool() if attention_mask is not None else None
            annotations, state = self.rnn(ordered, (zeros, zeros) if self.config.cell == "lstm" else zeros, mask)
        else:
            on_host = SequenceLayout.of(self.config, shape[0], attention_mask=attention_mask,
                                        packed_sequences=packed_sequences).host_lengths()
            packed = pack_padded_sequence(ordered, lengths.cpu() if on_host is None else on_host, batch_first=True,
                                          enforce_sorted=False)
            outputs, state = self.rnn(packed)
            annotations = pad_packed_sequence(outputs, batch_first=True, total_length=shape[1])[0]  # (B, S, C)
        if self.config.reverse_source:
            annotations = reverse_padded(annotations, lengths)  # back in source order
        state = state if isinstance(state, tuple) else (state,)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return LineageRnnEncoderOutput(
            last_hidden_state=annotations,
            final_hidden=self.final_layers(state[0]),
            final_cell=self.final_layers(state[1]) if len(state) == 2 else None,
            hidden_states=(embedded, annotations) if output_hidden_states else None,
        )


class LineageRnnBridge(nn.Module):
    """The decoder's initial state from the encoder's final one: zeros (`none`), a copy (`last`), or
    `tanh(W h)` for the hidden state and a linear map for an LSTM's cell (`linear`; Bahdanau's s_0 = tanh(W_s h))."""

    def __init__(self, config: LineageRnnConfig):
        super().__init__()
        self.config = config
        linear = config.bridge == "linear"
        self.hidden_proj = nn.Linear(config.hidden_size, config.hidden_size) if linear else None
        self.cell_proj = nn.Linear(config.hidden_size, config.hidden_size) if linear and config.cell == "lstm" else None

    def forward(self, encoder_outputs: LineageRnnEncoderOutput) -> State:
        config = self.config
        final = [encoder_outputs.final_hidden] + ([encoder_outputs.final_cell] if config.cell == "lstm" else [])
        if config.bridge == "none":
            batch = encoder_outputs.last_hidden_state.shape[0]
            zeros = encoder_outputs.last_hidden_state.new_zeros(config.num_decoder_layers, batch, config.hidden_size)
            return tuple(zeros for _ in final)
        if any(f is None for f in final):
            raise ValueError(f"`encoder_outputs` lack the encoder's final state that `bridge={config.bridge!r}` needs "
                             "(`final_hidden`, and `final_cell` for an LSTM).")
        state = [f.transpose(0, 1).contiguous() for f in final]  # (L, B, C) each
        if self.hidden_proj is not None:
            state[0] = torch.tanh(self.hidden_proj(state[0]))
        if self.cell_proj is not None:
            state[1] = self.cell_proj(state[1])
        return tuple(state)


class LineageRnnDecoder(nn.Module):
    """Target embeddings and the stacked recurrent decoder; this base class is Sutskever's (no attention, one kernel
    call). `forward(embedded (B, T, E), annotations (B, S, C), keys (B, S, K) | None, source_mask (B, S), state, feed)`
    returns `(outputs (B, T, C), alignments (B, T, S) | None, state, feed)`."""

    def __init__(self, config: LineageRnnConfig, extra_input: int = 0):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.padded_vocab_size, config.embedding_size,
                                         padding_idx=config.pad_token_id)
        self.rnn = make_rnn(config, config.embedding_size + extra_input, config.hidden_size, config.num_decoder_layers)
        self.attention = SCORES[config.attention](config.hidden_size) if config.attention != "none" else None

    def forward(self, embedded: torch.Tensor, annotations: torch.Tensor, *, keys: torch.Tensor | None,
                source_mask: torch.Tensor, state: State, feed: torch.Tensor | None) -> tuple:
        outputs, state = run_rnn(self.rnn, embedded, state)  # (B, T, C)
        return outputs, None, state, feed

    def attend(self, queries: torch.Tensor, annotations: torch.Tensor, keys: torch.Tensor,
               source_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """c_t = sum_i a_ti h_i with a_ti = softmax_i(score(query_t, h_i)): (B, T, C) queries -> (B, T, C) contexts
        and (B, T, S) weights."""
        weights = alignment(self.attention(queries, keys), source_mask)  # (B, T, S)
        return weights @ annotations, weights


class BahdanauDecoder(LineageRnnDecoder):
    """s_t = f(s_{t-1}, [E y_{t-1}; c_t]) with c_t attended from the previous state s_{t-1}, one step at a time;
    then the deep output t_t = maxout(U_o s_t + V_o E y_{t-1} + C_o c_t), pairs of units pooled to `output_size`."""

    def __init__(self, config: LineageRnnConfig):
        super().__init__(config, extra_input=config.hidden_size)
        self.readout = nn.Linear(2 * config.hidden_size + config.embedding_size, 2 * config.output_size)

    def forward(self, embedded: torch.Tensor, annotations: torch.Tensor, *, keys: torch.Tensor | None,
                source_mask: torch.Tensor, state: State, feed: torch.Tensor | None) -> tuple:
        steps, contexts, alignments = [], [], []
        for t in range(embedded.shape[1]):
            context, weights = self.attend(state[0][-1][:, None], annotations, keys, source_mask)  # s_{t-1}: top
            output, state = run_rnn(self.rnn, torch.cat([embedded[:, t: t + 1], context], dim=-1), state)
            steps.append(output)
            contexts.append(context)
            alignments.append(weights)
        steps, contexts = torch.cat(steps, dim=1), torch.cat(contexts, dim=1)  # (B, T, C)
        pre_output = self.readout(torch.cat([steps, contexts, embedded], dim=-1))  # (B, T, 2 output_size)
        outputs = pre_output.unflatten(-1, (-1, 2)).amax(dim=-1)  # (B, T, output_size)
        return outputs, torch.cat(alignments, dim=1), state, feed


class LuongDecoder(LineageRnnDecoder):
    """h_t from the recurrent step, c_t attended from h_t, h~_t = tanh(W_c [c_t; h_t]). Without input feeding the
    whole target runs in one kernel call; with it, h~_{t-1} joins the input of step t (h~_0 = 0)."""

    def __init__(self, config: LineageRnnConfig):
        super().__init__(config, extra_input=config.hidden_size if config.input_feeding else 0)
        self.attention_out = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)  # W_c

    def attentional(self, hidden: torch.Tensor, annotations: torch.Tensor, keys: torch.Tensor,
                    source_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        context, weights = self.attend(hidden, annotations, keys, source_mask)
        return torch.tanh(self.attention_out(torch.cat([context, hidden], dim=-1))), weights  # (B, T, C)

    def forward(self, embedded: torch.Tensor, annotations: torch.Tensor, *, keys: torch.Tensor | None,
                source_mask: torch.Tensor, state: State, feed: torch.Tensor | None) -> tuple:
        if not self.config.input_feeding:
            hidden, state = run_rnn(self.rnn, embedded, state)  # (B, T, C)
            outputs, weights = self.attentional(hidden, annotations, keys, source_mask)
            return outputs, weights, state, feed
        if feed is None:
            feed = embedded.new_zeros(embedded.shape[0], self.config.hidden_size)  # (B, C)
        steps, alignments = [], []
        for t in range(embedded.shape[1]):
            hidden, state = run_rnn(self.rnn, torch.cat([embedded[:, t: t + 1], feed[:, None]], dim=-1), state)
            output, weights = self.attentional(hidden, annotations, keys, source_mask)
            feed = output[:, 0]
            steps.append(output)
            alignments.append(weights)
        return torch.cat(steps, dim=1), torch.cat(alignments, dim=1), state, feed


DECODERS = {"none": LineageRnnDecoder, "bahdanau": BahdanauDecoder, "luong-dot": LuongDecoder,
            "luong-general": LuongDecoder, "luong-concat": LuongDecoder}


# ----------------------------------------------------------------------------------------------------------
# Pretrained models
# ----------------------------------------------------------------------------------------------------------


class LineageRnnPreTrainedModel(LineagePreTrainedModel):
    config_class = LineageRnnConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    # `device_map="auto"` keeps each on one device: a decoder's steps mix its embeddings, recurrence and attention
    _no_split_modules = ["LineageRnnEncoder", "LineageRnnDecoder", "BahdanauDecoder", "LuongDecoder"]
    _supports_sdpa = False
    _supports_flash_attn = False
    _supports_attention_backend = False
    # the decoder's recurrent state cannot be rolled back to drop rejected draft tokens: transformers then refuses
    # assisted generation (an assistant model, prompt lookup) by name before any work
    _is_stateful = True
    _can_record_outputs = {}
    auto_classes = {
        "AutoModel": "LineageRnnModel",
        "AutoModelForSeq2SeqLM": "LineageRnnForConditionalGeneration",
    }

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """`generate()` must not build a key/value cache: the model makes its own `LineageRnnCache`."""
        return False

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True) -> nn.Embedding:
        """transformers resizes the input embedding (the source side's) and the output layer; the target side's own
        embedding gets the same rows, the vocabulary being shared (before transformers ties the output layer to it)."""
        embeddings = super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        decoder = self.base_model.decoder
        decoder.embed_tokens = self._get_resized_embeddings(decoder.embed_tokens, embeddings.num_embeddings,
                                                            mean_resizing=mean_resizing)
        return embeddings

    def _init_weights(self, module: nn.Module) -> None:
        """Every weight and bias uniform in [-r, r] (Sutskever et al. 2014, Luong et al. 2015); padding rows 0."""
        bound = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding, nn.RNNBase)):
            for parameter in module.parameters(recurse=False):
                uniform_(parameter, -bound, bound)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            if not getattr(module.weight, "_is_hf_initialized", False):
                zeros_(module.weight[module.padding_idx])


class LineageRnnModel(Seq2SeqBase, LineageRnnPreTrainedModel):
    """The bare encoder-decoder: `encode` the source once, `decode` from the bridged (or cached) state;
    `last_hidden_state` is what the output projection reads."""

    def __init__(self, config: LineageRnnConfig):
        super().__init__(config)
        self.encoder = LineageRnnEncoder(config)
        self.bridge = LineageRnnBridge(config)
        self.decoder = DECODERS[config.attention](config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value

    def encode(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> LineageRnnEncoderOutput:
        """Run the encoder once over the (right-padded) source: (B, S) ids -> (B, S, C) annotations (`kwargs`: the
        encoder's `output_hidden_states`, `packed_sequences`)."""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)

    @forward_arguments
    def decode(
        self,
        decoder_input_ids: torch.Tensor | None,
        encoder_outputs: LineageRnnEncoderOutput,
        attention_mask: torch.Tensor | None = None,
        cache: "LineageRnnCache | None" = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> ModelOutput:
        """(B, T) target ids -> (B, T, C) output states, continuing from `cache` when it holds a state
        (then T counts the new tokens only) and storing the state reached there."""
        self._check_target(decoder_input_ids, decoder_inputs_embeds, decoder_attention_mask=None, cache=cache,
                           source_shape=encoder_outputs.last_hidden_state.shape[:2], attention_mask=attention_mask)
        return self._decode(decoder_input_ids, decoder_inputs_embeds, encoder_outputs=encoder_outputs,
                            attention_mask=attention_mask, decoder_attention_mask=None, cache=cache, **kwargs)

    @staticmethod
    def as_encoder_outputs(encoder_outputs) -> LineageRnnEncoderOutput | None:
        """`encoder_outputs` as the encoder returns them (also as a plain dict); a bare tuple is refused, since the
        positions of its optional fields are ambiguous."""
        if encoder_outputs is None or isinstance(encoder_outputs, LineageRnnEncoderOutput):
            return encoder_outputs
        if isinstance(encoder_outputs, dict) and "last_hidden_state" in encoder_outputs:
            return LineageRnnEncoderOutput(**encoder_outputs)
        raise ValueError("`encoder_outputs` must be what `model.get_encoder()` returns (a `LineageRnnEncoderOutput` "
                         "with `last_hidden_state` and the final state the bridge reads), got "
                         f"{type(encoder_outputs).__name__}.")

    @staticmethod
    def _new_cache() -> "LineageRnnCache":
        return LineageRnnCache()

    def _check_target(
        self,
        decoder_input_ids: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        *,
        decoder_attention_mask: torch.Tensor | None,
        cache: Cache | None,
        source_shape: torch.Size,
        attention_mask: torch.Tensor | None,
    ) -> None:
        if cache is not None and not isinstance(cache, LineageRnnCache):
            raise ValueError(f"`{CACHE_NAME}` must be a `LineageRnnCache` (the recurrent decoder state), got "
                             f"{type(cache).__name__}.")
        past = cache.get_seq_length() if cache is not None else 0
        shape = check_decoder_inputs(decoder_input_ids, decoder_inputs_embeds, self.config.vocab_size, source_shape,
                                     attention_mask, past_length=past)
        if cache is not None and cache.is_initialized and cache.batch_size != shape[0]:
            raise ValueError(f"`{CACHE_NAME}` holds {cache.batch_size} sequences but "
                             f"`decoder_input_ids` have {shape[0]}.")
        if decoder_attention_mask is not None:  # the decoder reads left to right: right padding never matters
            total = torch.Size((shape[0], past + shape[1]))
            check_mask_shape(decoder_attention_mask, total, "decoder_attention_mask",
                             f"{past} cached + {shape[1]} new decoder tokens")
            right_padded_lengths(decoder_attention_mask, total, "decoder_attention_mask")

    def _decode(
        self,
        decoder_input_ids: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        *,
        encoder_outputs: LineageRnnEncoderOutput,
        attention_mask: torch.Tensor | None,
        decoder_attention_mask: torch.Tensor | None,
        cache: "LineageRnnCache | None",
        packed_sequences: PackedSequences | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> ModelOutput:
        """`decoder_attention_mask` (checked right-padded) and `packed_sequences` (the source rows') change nothing:
        the decoder reads left to right, and the encoder has run."""
        if decoder_inputs_embeds is None:
            decoder_inputs_embeds = self.decoder.embed_tokens(decoder_input_ids)  # (B, T, E)
        embedded = self.dropout(decoder_inputs_embeds)
        annotations = encoder_outputs.last_hidden_state  # (B, S, C)
        source_mask = (attention_mask.bool() if attention_mask is not None
                       else annotations.new_ones(annotations.shape[:2], dtype=torch.bool))  # (B, S)
        if cache is not None and cache.is_initialized:
            state, feed, keys = cache.state, cache.feed, cache.keys
        else:
            state, feed = self.bridge(encoder_outputs), None
            keys = self.decoder.attention.project(annotations) if self.decoder.attention is not None else None
        outputs, weights, state, feed = self.decoder(embedded, annotations, keys=keys, source_mask=source_mask,
                                                     state=state, feed=feed)
        if cache is not None:
            cache.store(state, feed, keys, embedded.shape[1])
        config = self.config
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=outputs,
            **cache_keyword(cache),
            hidden_states=(embedded, outputs) if output_hidden_states else None,
            cross_attentions=(weights[:, None],) if output_attentions and weights is not None else None,  # (B, 1, T, S)
        )


class LineageRnnForConditionalGeneration(Seq2SeqLMBase, LineageRnnPreTrainedModel, LineageGenerationMixin):
    """Sequence-to-sequence model with the output projection, the (label-smoothed) loss and `generate()` over a
    `LineageRnnCache`."""

    _tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}

    def __init__(self, config: LineageRnnConfig):
        super().__init__(config)
        self.model = LineageRnnModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.lm_head = LineageLinear(config.output_size, config.padded_vocab_size, bias=False)
        self.post_init()

    def lm_head_inputs(self) -> dict:
        """Dropout on the states the output layer reads."""
        return {"transform": self.dropout}


__all__ = [
    "LineageRnnCache",
    "LineageRnnEncoderOutput",
    "LineageRnnForConditionalGeneration",
    "LineageRnnModel",
    "LineageRnnPreTrainedModel",
]
