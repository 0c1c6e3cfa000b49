"""The commands' PNG figures, with their title and command in their metadata (PIL: `Image.open(png).text`)."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path: Path, source: str | None, dpi: int = 100) -> Path:
    """`figure` as the PNG `path`, then closed; `source`: the command that drew it (None: not known)."""
    title = figure.get_suptitle() or (figure.axes[0].get_title() if figure.axes else "")
    figure.savefig(path, dpi=dpi, metadata={"Title": title, "Source": source}, pil_kwargs={"compress_level": 1})
    pyplot().close(figure)
    return path


__all__ = ["pyplot", "save_figure"]
