"""Pictures and pages of attention weights: PNG heatmaps, the raw weights, and an interactive HTML view.

For each `AttentionMap` (`train.analysis.attention`) `write_all` writes into a folder the layer x head grid and
per-layer heatmaps (PNG; for cross attention the head-averaged alignment), the weights as `.npy` with `tokens.json`,
a self-contained `attention.html` (no network) and, with `bertviz` installed, bertviz's views. Panels and labels
scale with the number of tokens (`MAX_TICKS`, `MAX_LABEL_CHARS`); every figure's colour bar runs from 0 to its largest
weight.
The command and its outputs: docs/using.md, "Attention maps".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, findfont, get_font

from train.analysis.attention import AttentionMap
from train.run import strict_json
from train.run.figures import save_figure

MAX_TICKS = 64
MAX_LABEL_CHARS = 14
GRID_PANEL_INCHES = 1.6
INCHES_PER_TOKEN = 0.16
DPI = 100
COLOURS = "viridis"
TITLES = {"self": "self-attention", "encoder": "encoder self-attention", "decoder": "decoder self-attention",
          "cross": "cross-attention (target x source)"}


def display_tokens(labels: list[str]) -> list[str]:
    """Axis labels from readable token labels (`train.analysis.attention.labels`): long ones cut, and a character
    the figure's font cannot draw written as its code point (`東` -> `U+6771`) rather than an empty box."""
    font = get_font(findfont(FontProperties()))
    shown = []
    for label in labels:
        label = "".join(c if font.get_char_index(ord(c)) or c.isspace() else f"U+{ord(c):04X}" for c in label)
        shown.append(label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…")
    return shown


def font_size(count: int) -> float:
    """Tick-label points for `count` tokens on a full-size panel: the height of one label's cell (every
    `stride`-th token is labelled), between 4 and 11."""
    shown = math.ceil(count / math.ceil(count / MAX_TICKS))
    return float(np.clip(_panel_side(count) / shown * 72 * 0.8, 4, 11))


def tick_positions(count: int, marked: Sequence[int] = ()) -> list[int]:
    """Every token up to `MAX_TICKS`, else every k-th, and each of `marked` (special tokens: the [SEP] between two
    segments) in place of the k-th ones less than k away from it."""
    stride = math.ceil(count / MAX_TICKS)
    regular = [t for t in range(0, count, stride) if all(abs(t - m) >= stride for m in marked)]
    return sorted({*regular, *marked})


def _label_inches(labels: list[str], marked: Sequence[int]) -> float:
    """Room for the widest label drawn (about 0.6 em a character)."""
    widest = max((len(labels[i]) for i in tick_positions(len(labels), marked)), default=0)
    return widest * font_size(len(labels)) * 0.6 / 72 + 0.15


def _panel_side(count: int) -> float:
    """Inches of a full-size panel's side with `count` tokens: `INCHES_PER_TOKEN` a token, 2.5 to 10."""
    return float(np.clip(INCHES_PER_TOKEN * count + 0.5, 2.5, 10))


def _mosaic(weights: np.ndarray, per_row: int, gaps: tuple[int, int]) -> np.ndarray:
    """(N, R, K) matrices as one image, `per_row` blocks a row, separated by blank (NaN) gaps of `gaps` cells.
    One image on one axis: an axis (and its ticks) per panel makes a grid of 12 x 12 heads slow to draw."""
    count, rows, columns = weights.shape
    pitch = (rows + gaps[0], columns + gaps[1])
    image = np.full((math.ceil(count / per_row) * pitch[0] - gaps[0], min(count, per_row) * pitch[1] - gaps[1]),
                    np.nan)
    for n, matrix in enumerate(weights):
        top, left = n // per_row * pitch[0], n % per_row * pitch[1]
        image[top : top + rows, left : left + columns] = matrix  # (R, K)
    return image


def _draw(weights: np.ndarray, per_row: int, gaps: tuple[int, int], panel: tuple[float, float],
          margins: tuple[float, float], title: str):
    """The (N, R, K) blocks of `_mosaic`, each `panel` (width, height) inches, on one colour scale from 0 to the
    largest weight; `margins` (left, top) are computed, as `bbox_inches="tight"` would draw every figure twice."""
    image = _mosaic(weights, per_row, gaps)
    inches = (image.shape[1] * panel[0] / weights.shape[2], image.shape[0] * panel[1] / weights.shape[1])
    (left, top), right, bottom = margins, 1.1, 0.55
    width, height = max(left + inches[0] + right, 0.11 * len(title) + 0.5), top + inches[1] + bottom
    figure = Figure(figsize=(width, height))
    ax = figure.add_axes((left / width, bottom / height, inches[0] / width, inches[1] / height))
    shown = ax.imshow(image, cmap=COLOURS, vmin=0.0, vmax=float(weights.max()) or 1.0, aspect="auto",
                      interpolation="nearest")
    ax.set_frame_on(False)
    ax.xaxis.tick_top()
    colour_axis = figure.add_axes(((left + inches[0] + 0.25) / width, bottom / height, 0.2 / width, inches[1] / height))
    figure.colorbar(shown, cax=colour_axis)
    figure.suptitle(title, fontsize=13, y=1 - 0.1 / height, va="top")
    return figure, ax


def draw_heads(weights: np.ndarray, heads: list[int | None], rows: list[str], columns: list[str], title: str,
               path: Path, source: str, marked: tuple[Sequence[int], Sequence[int]] = ((), ())) -> None:
    """The (H, R, K) heads of one layer (or one matrix: H = 1, head None), each at full size, four a row;
    token labels left of every row of heads and above the first (`marked`: rows and columns always labelled)."""
    per_row, (count, n_rows, n_columns) = min(len(heads), 4), weights.shape
    panel = (_panel_side(n_columns), _panel_side(n_rows))
    gaps = (math.ceil(0.45 * n_rows / panel[1]), math.ceil(0.3 * n_columns / panel[0]))  # room for "head h"
    figure, ax = _draw(weights, per_row, gaps, panel, (_label_inches(rows, marked[0]) + 0.2,
                                                        _label_inches(columns, marked[1]) + 0.6), title)
    blocks = (math.ceil(count / per_row), per_row)
    for axis, labels, always, blocks_along, pitch, rotation in (
            (ax.yaxis, rows, marked[0], blocks[0], n_rows + gaps[0], 0),
            (ax.xaxis, columns, marked[1], blocks[1], n_columns + gaps[1], 90)):
        positions = tick_positions(len(labels), always)
        axis.set_ticks([b * pitch + i for b in range(blocks_along) for i in positions])
        axis.set_ticklabels([labels[i] for _ in range(blocks_along) for i in positions],
                            fontsize=font_size(len(labels)), rotation=rotation)
    ax.tick_params(top=False, left=False)
    for n, head in enumerate(heads):
        if head is not None:
            x = n % per_row * (n_columns + gaps[1]) + n_columns / 2 - 0.5
            ax.text(x, n // per_row * (n_rows + gaps[0]) + n_rows - 0.4, f"head {head}", ha="center", va="top")
    save_figure(figure, path, source, DPI)


def draw_matrix(matrix: np.ndarray, rows: list[str], columns: list[str], title: str, path: Path,
                source: str, marked: tuple[Sequence[int], Sequence[int]] = ((), ())) -> None:
    """One (R, K) matrix at full size with token labels and a colour bar."""
    draw_heads(matrix[None], [None], rows, columns, title, path, source, marked)


def draw_grid(attention: AttentionMap, title: str, path: Path, source: str) -> None:
    """Every selected layer x head as small multiples without token labels, on one colour scale."""
    layers, heads, rows, columns = attention.weights.shape
    gaps = (max(1, rows // 10), max(1, columns // 10))
    blocks = attention.weights.reshape(layers * heads, rows, columns)
    figure, ax = _draw(blocks, heads, gaps, (GRID_PANEL_INCHES, GRID_PANEL_INCHES), (0.6, 0.8), title)
    ax.set_xticks([j * (columns + gaps[1]) + columns / 2 - 0.5 for j in range(heads)],
                  [f"head {h}" for h in attention.heads], fontsize=9)
    ax.set_yticks([i * (rows + gaps[0]) + rows / 2 - 0.5 for i in range(layers)],
                  [f"layer {layer}" for layer in attention.layers], fontsize=9, rotation=90, va="center")
    ax.tick_params(length=0)
    save_figure(figure, path, source, DPI)


def draw_pictures(attention: AttentionMap, labels: dict[str, list[str]], marked: dict[str, list[int]], folder: Path,
                  source: str) -> list[Path]:
    """Every PNG of one kind of attention, axes labelled with `labels` (by axis; `marked`: positions always
    labelled); returns their paths."""
    rows, columns = display_tokens(labels[attention.rows]), display_tokens(labels[attention.columns])
    always = (marked[attention.rows], marked[attention.columns])
    title = TITLES[attention.name]
    written = [folder / f"{attention.name}_grid.png"]
    draw_grid(attention, f"{title}: layers x heads", written[0], source)
    for layer, weights in zip(attention.layers, attention.weights, strict=True):
        if attention.name == "cross":
            written.append(folder / f"cross_layer{layer}_mean.png")
            draw_matrix(weights.mean(axis=0), rows, columns, f"{title}, layer {layer}, mean of heads", written[-1],
                        source, always)
            if len(attention.heads) == 1:
                continue  # the mean is the head (an RNN's single attention)
        written.append(folder / f"{attention.name}_layer{layer}.png")
        draw_heads(weights, attention.heads, rows, columns, f"{title}, layer {layer}", written[-1], source, always)
    return written


# ----------------------------------------------------------------------------------------------------------
# The self-contained HTML page
# ----------------------------------------------------------------------------------------------------------

_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Attention maps: __TITLE__</title>
<style>
body{font-family:Helvetica,Arial,sans-serif;margin:16px;color:#222}
select{margin-right:12px}#info{height:1.4em;margin:8px 0;font-family:monospace}
#text span{padding:1px 3px;margin:1px;display:inline-block;border-radius:3px;cursor:default}
#text .query{outline:2px solid #d62728}canvas{display:block;margin-top:8px}
</style></head><body>
<h3>Attention maps: __TITLE__</h3>
<div>attention <select id="kind"></select> layer <select id="layer"></select> head <select id="head"></select></div>
<div id="info">hover a cell of the matrix or a token of the query row</div>
<div id="text"></div><canvas id="matrix"></canvas>
<script id="data" type="application/json">__DATA__</script>
<script>
const data = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
const CELL_MAX = 28, LABEL = 110;
function fill(select, labels) {
  select.innerHTML = labels.map((l, i) => `<option value="${i}">${l}</option>`).join("");
}
function current() {
  const kind = data.kinds[$("kind").value], layer = kind.weights[$("layer").value], h = +$("head").value;
  const matrix = h < kind.heads.length ? layer[h] : layer[0].map((row, r) => row.map((_, c) =>
    layer.reduce((sum, head) => sum + head[r][c], 0) / layer.length));
  return {kind, matrix, rows: data.labels[kind.rows], columns: data.labels[kind.columns]};
}
function colour(w, top) { return `rgba(31,119,180,${Math.min(w / top, 1).toFixed(3)})`; }
function showRow(view, r) {
  const top = Math.max(...view.matrix[r]) || 1;
  const spans = view.columns.map((t, c) => `<span title="${view.matrix[r][c].toFixed(3)}" ` +
    `style="background:${colour(view.matrix[r][c], top)}">${esc(t)}</span>`);
  $("text").innerHTML = `<span class="query">${esc(view.rows[r])}</span> attends to: ` + spans.join("");
}
function esc(t) { return t.replace(/&/g, "&amp;").replace(/</g, "&lt;"); }
function draw() {
  const view = current(), canvas = $("matrix"), ctx = canvas.getContext("2d");
  const cell = Math.max(4, Math.min(CELL_MAX, Math.floor(900 / view.columns.length)));
  canvas.width = LABEL + cell * view.columns.length; canvas.height = LABEL + cell * view.rows.length;
  const top = Math.max(...view.matrix.flat()) || 1;
  view.matrix.forEach((row, r) => row.forEach((w, c) => {
    ctx.fillStyle = colour(w, top); ctx.fillRect(LABEL + c * cell, LABEL + r * cell, cell, cell); }));
  ctx.fillStyle = "#222"; ctx.font = `${Math.min(12, cell)}px sans-serif`; ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  view.rows.forEach((t, r) => ctx.fillText(t.slice(0, 14), LABEL - 4, LABEL + (r + 0.5) * cell));
  ctx.textAlign = "left";
  view.columns.forEach((t, c) => {
    ctx.save(); ctx.translate(LABEL + (c + 0.5) * cell, LABEL - 4); ctx.rotate(-Math.PI / 2);
    ctx.fillText(t.slice(0, 14), 0, 0); ctx.restore();
  });
  canvas.onmousemove = (e) => {
    const c = Math.floor((e.offsetX - LABEL) / cell), r = Math.floor((e.offsetY - LABEL) / cell);
    if (r < 0 || c < 0 || r >= view.rows.length || c >= view.columns.length) return;
    const weight = view.matrix[r][c].toFixed(4);
    $("info").textContent = `${view.rows[r]} (row ${r}) -> ${view.columns[c]} (column ${c}): ${weight}`;
    showRow(view, r);
  };
  showRow(view, 0);
}
function pickKind() {
  const kind = data.kinds[$("kind").value];
  fill($("layer"), kind.layers.map(String));
  fill($("head"), kind.heads.map(String).concat(["mean of heads"]));
  draw();
}
fill($("kind"), data.kinds.map((k) => k.title));
$("kind").onchange = pickKind; $("layer").onchange = draw; $("head").onchange = draw;
pickKind();
</script></body></html>
"""


def page(maps: list[AttentionMap], labels: dict[str, list[str]], title: str) -> str:
    """The self-contained HTML view of `maps` (weights rounded to 4 decimals), tokens shown by their `labels`."""
    kinds = [{"title": TITLES[m.name], "rows": m.rows, "columns": m.columns, "layers": m.layers, "heads": m.heads,
              "weights": np.round(m.weights, 4).tolist()} for m in maps]
    data = json.dumps({"kinds": kinds, "labels": labels}).replace("</", "<\\/")  # no early </script>
    escaped_title = title.replace("&", "&amp;").replace("<", "&lt;")
    return _PAGE.replace("__TITLE__", escaped_title).replace("__DATA__", data)


def bertviz_pages(maps: list[AttentionMap], labels: dict[str, list[str]]) -> dict[str, str]:
    """bertviz's head and model views (file name -> HTML) when bertviz is installed, else nothing."""
    try:
        import torch
        from bertviz import head_view, model_view
    except ImportError:
        return {}
    by_name = {m.name: [torch.from_numpy(layer)[None] for layer in m.weights] for m in maps}  # L x (1, H, R, K)
    if "self" in by_name:
        arguments = {"attention": by_name["self"], "tokens": labels["input"]}
    else:  # bertviz labels decoder rows with the decoder's input tokens
        arguments = {"encoder_attention": by_name.get("encoder"), "decoder_attention": by_name.get("decoder"),
                     "cross_attention": by_name.get("cross"), "encoder_tokens": labels["source"],
                     "decoder_tokens": labels["decoder_input"]}
    return {f"bertviz_{view.__name__}.html": view(**arguments, html_action="return").data
            for view in (head_view, model_view)}


def write_all(maps: list[AttentionMap], tokens: dict[str, list[str]], labels: dict[str, list[str]], description: dict,
              folder: Path) -> list[Path]:
    """Every file of the module docstring into `folder` (`description["command"]` in every PNG); their paths."""
    written, special = [], set(description["always_labelled"])
    marked = {axis: [i for i, token in enumerate(entries) if token in special] for axis, entries in tokens.items()}
    for attention in maps:
        written += draw_pictures(attention, labels, marked, folder, description["command"])
        written.append(folder / f"{attention.name}.npy")
        np.save(written[-1], attention.weights.astype(np.float32))
    index = {**description, "tokens": tokens, "labels": labels, "maps": {
        m.name: {"file": f"{m.name}.npy", "shape": list(m.weights.shape), "rows": m.rows, "columns": m.columns,
                 "layers": m.layers, "heads": m.heads} for m in maps}}
    written.append(folder / "tokens.json")
    written[-1].write_text(strict_json.dumps(index, indent=1, ensure_ascii=False))
    pages = {"attention.html": page(maps, labels, description.get("model", "")), **bertviz_pages(maps, labels)}
    for name, html in pages.items():
        written.append(folder / name)
        written[-1].write_text(html, encoding="utf-8")
    return written


__all__ = ["MAX_LABEL_CHARS", "MAX_TICKS", "display_tokens", "draw_grid", "draw_heads", "draw_matrix",
           "draw_pictures", "font_size", "page", "tick_positions", "write_all"]
