"""`HostReads`: counts the reads that wait for the accelerator (`Tensor.item`, `__bool__`, `__int__`, `__float__`,
`__index__`, `tolist`) by step and by the innermost frame outside torch. Shared by the host-read tests of the engine,
the packing and the unpadding."""

import collections
import os
import traceback

import torch
from conftest import REPO
from torch.overrides import TorchFunctionMode

READS = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.tolist,
         torch.Tensor.__index__}
TORCH_DIR = os.path.dirname(torch.__file__)


class HostReads(TorchFunctionMode):
    """Counts reads by (step, origin); `step` is the optimizer step whose micro-batches and record are running, or
    ("after", step) between steps (evaluation, checkpoints). Paused while a batch is loaded."""

    def __init__(self):
        super().__init__()
        self.step, self.paused = "setup", 0
        self.reads: dict = collections.defaultdict(collections.Counter)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS and not self.paused:
            frame = next(f for f in reversed(traceback.extract_stack()[:-1])
                         if not f.filename.startswith(TORCH_DIR) and f.filename != __file__)
            where = (os.path.basename(frame.filename) if "site-packages" in frame.filename  # transformers
                     else os.path.relpath(frame.filename, REPO))  # "train/run/engine.py", "modeling/checks.py"
            self.reads[self.step][(where, frame.name)] += 1
        return func(*args, **(kwargs or {}))
