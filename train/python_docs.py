"""Write the Python reference manual's topic texts as a causal-LM corpus: the data of `relative-gpt-python-docs`.

    python -m train.python_docs [folder] [--overwrite_output_dir]   # writes <folder>/train.txt, validation.txt

The text is `pydoc_data.topics` (shipped with CPython: real English prose that is not the embedded corpus), one
paragraph per line, every tenth topic (by name) held out. `folder` must be new or empty, or this command's own.
"""

from __future__ import annotations

import pydoc_data.topics
import re
from pathlib import Path

from train.cli import CommandParser, run_script
from train.run.run_folder import check_writer_output, staged_output

COMMAND = "python-docs"
DEFAULT_FOLDER = "outputs/python-docs"  # where the recipe reads its `train_file` and `validation_file`


def write_python_docs(folder: str | Path = DEFAULT_FOLDER, overwrite: bool = False) -> tuple[Path, Path]:
    """Write the training and held-out paragraphs; returns the two files' paths."""
    target = check_writer_output(str(folder), COMMAND, "folder", overwrite)
    train, validation = [], []
    for i, name in enumerate(sorted(pydoc_data.topics.topics)):
        paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", pydoc_data.topics.topics[name]))
        (validation if i % 10 == 5 else train).extend(p for p in paragraphs if p)
    names = "train.txt", "validation.txt"
    with staged_output(target, COMMAND) as staging:
        for name, lines in zip(names, (train, validation)):
            (staging / name).write_text("\n".join(lines) + "\n")
    return Path(folder) / names[0], Path(folder) / names[1]


def main(argv: list[str] | None = None) -> tuple[Path, Path]:
    parser = CommandParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=DEFAULT_FOLDER)
    parser.add_switch("--overwrite_output_dir", help="replace the corpus this command wrote into the folder before")
    args = parser.parse_args(argv)
    paths = write_python_docs(args.folder, args.overwrite_output_dir)
    print(*paths, sep="\n")
    return paths


if __name__ == "__main__":
    run_script(main)
