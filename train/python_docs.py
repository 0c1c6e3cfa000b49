"""The Python reference manual's topic texts (`pydoc_data.topics`, about 430 000 characters shipped with CPython) as
a causal-LM corpus of real English prose that is not the embedded one: one paragraph per line, every tenth topic
(by name) held out. The data of the recipe `relative-gpt-python-docs`:

    python -m train.python_docs [folder]   # writes <folder>/train.txt and <folder>/validation.txt
"""

from __future__ import annotations

import argparse
import pydoc_data.topics
import re
from pathlib import Path

DEFAULT_FOLDER = "outputs/python-docs"  # where the recipe reads its `train_file` and `validation_file`


def write_python_docs(folder: str | Path = DEFAULT_FOLDER) -> tuple[Path, Path]:
    """Write the training and held-out paragraphs; returns the two files' paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, validation = [], []
    for i, name in enumerate(sorted(pydoc_data.topics.topics)):
        paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", pydoc_data.topics.topics[name]))
        (validation if i % 10 == 5 else train).extend(p for p in paragraphs if p)
    paths = folder / "train.txt", folder / "validation.txt"
    for path, lines in zip(paths, (train, validation)):
        path.write_text("\n".join(lines) + "\n")
    return paths


def main(argv: list[str] | None = None) -> tuple[Path, Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=DEFAULT_FOLDER)
    paths = write_python_docs(parser.parse_args(argv).folder)
    print(*paths, sep="\n")
    return paths


if __name__ == "__main__":
    main()
