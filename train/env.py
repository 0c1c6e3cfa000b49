"""Print the environment Lineage runs in, for a bug report: library releases against the tested range, the device.

    lineage env
"""

from __future__ import annotations

import argparse

from train.cli import run_script
from train.run.environment import device, report


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = [("library", "installed", "declared", "tested?"), *report()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
    print(f"device: {device()}")
    outside = [name for name, _, _, status in rows[1:] if status.startswith("OUTSIDE")]
    if outside:
        print(f"warning: {', '.join(outside)} outside the range Lineage declares: reinstall with "
              "`pip install -e .` (or the wheel) to get releases it supports")


if __name__ == "__main__":
    run_script(main)
