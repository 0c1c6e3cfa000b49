"""Relative position representations (Shaw et al. 2018): the distance rows `clip(j - i, k) + k` of every query-key
pair, computed once per forward (`relative_attention_inputs`), and the kernels that add the relative tables to
attention without a (T, S, D) tensor. Dimension legend as in `layers.py`.
"""

import torch


def relative_position_index(query_positions: torch.Tensor, key_positions: torch.Tensor,
                            max_distance: int) -> torch.Tensor:
    """Shaw et al.'s clip(j - i, k) + k for query positions i (B or 1, T) and key positions j (B or 1, S): the
    (B or 1, T, S) rows in [0, 2k] of a relative table; distances beyond k (or -k) share the last (or first) row."""
    distance = key_positions[:, None, :] - query_positions[:, :, None]  # (B|1, T, S)
    return distance.clamp(-max_distance, max_distance) + max_distance


def key_positions(query_positions: torch.Tensor, past_length: int | torch.Tensor = 0,
                  attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Positions (B or 1, past + T) of the keys over `past_length` cached and T new tokens: a new key has its query's
    position; a cached one counts back over the real tokens of a 2D `attention_mask` (padding takes no position), or
    consecutively without one."""
    past = int(past_length)
    if past == 0:
        return query_positions
    if attention_mask is None or attention_mask.dim() != 2:
        real = torch.ones(1, past, dtype=torch.long, device=query_positions.device)
    else:
        real = attention_mask[:, :past].long()
    behind = real.flip(-1).cumsum(-1).flip(-1)  # (B|1, past): real cached tokens from each slot to the cache's end
    cached = query_positions[:, :1] - behind
    return torch.cat([cached, query_positions.expand(cached.shape[0], -1)], dim=-1)


def relative_attention_inputs(config, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None,
                              past_length: int | torch.Tensor = 0,
                              attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The blocks' `relative_position_index` for (B, T, C) `hidden_states` at `position_ids` (by default after
    `past_length`), computed once per forward; nothing for absolute positions only."""
    if config.relative_attention is None:
        return {}
    if position_ids is None:
        position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None] + past_length  # (1, T)
    keys = key_positions(position_ids, past_length, attention_mask)
    return {"relative_position_index": relative_position_index(position_ids, keys, config.max_relative_position)}


def relative_key_scores(query: torch.Tensor, index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`q_i a^K_ij^T` for every query i and key j, (B, H, T, S): one (B, H, T, D) x (D, 2k+1) matmul against the
    table, then a gather by distance row `index` (B or 1, 1, T, S); never a (T, S, D) tensor of gathered vectors."""
    per_distance = torch.matmul(query, table.transpose(0, 1))  # (B, H, T, 2k+1)
    return torch.gather(per_distance, -1, index.expand(*query.shape[:3], index.shape[-1]))


def relative_value_term(probs: torch.Tensor, index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """`sum_j alpha_ij a^V_ij`, (B, H, T, D): the probabilities (B, H, T, S) summed into their 2k+1 distance
    buckets (a scatter-add by `index`), then one (B, H, T, 2k+1) x (2k+1, D) matmul."""
    buckets = probs.new_zeros(*probs.shape[:3], table.shape[0])  # (B, H, T, 2k+1)
    buckets = buckets.scatter_add(-1, index.expand_as(probs), probs)
    return torch.matmul(buckets, table)


__all__ = [
    "key_positions",
    "relative_attention_inputs",
    "relative_key_scores",
    "relative_position_index",
    "relative_value_term",
]
