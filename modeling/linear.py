"""`LineageLinear`: `nn.Linear` with oneDNN's matmul for CPU inference; its parameters and keys are `nn.Linear`'s."""

import torch
from torch import nn

# oneDNN's fp32 matmul; present in x86 CPU builds of torch. Inductor uses the same op for CPU linears.
_ONEDNN_LINEAR = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
# Below this many weights (a 512 x 512 matrix) the kernel's fixed cost per call outweighs what it saves
# (docs/performance.md, "Sparse prediction and the CPU inference kernel").
_ONEDNN_MIN_WEIGHTS = 2**18


def _onednn_reads(parameter: torch.Tensor) -> bool:
    """A weight or bias the oneDNN kernel reads correctly: a dense float32 CPU tensor (a strided bias is misread)."""
    return (type(parameter) in (torch.Tensor, nn.Parameter) and parameter.device.type == "cpu"
            and parameter.dtype == torch.float32 and parameter.is_contiguous())


class LineageLinear(nn.Linear):
    """`nn.Linear` (same parameters, same keys) with oneDNN's multi-threaded matmul for float32 CPU inference on weights
    of at least 512 x 512 (MKL's matrix-vector path runs on one thread; docs/performance.md). The kernels round
    differently (about 1e-6): `LineageLinear.fast_cpu_inference = False` gives `nn.Linear`'s results bit for bit.
    Training, other devices and dtypes, autocast and `torch.compile` always take `F.linear`."""

    fast_cpu_inference: bool = _ONEDNN_LINEAR is not None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if (
            self.fast_cpu_inference
            and not torch.is_grad_enabled()  # first: training returns to `F.linear` after one check
            and type(input) is torch.Tensor
            and input.device.type == "cpu"
            and input.dtype == torch.float32
            and self.weight.numel() >= _ONEDNN_MIN_WEIGHTS
            and _onednn_reads(self.weight)
            and (self.bias is None or _onednn_reads(self.bias))
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()
        ):
            return _ONEDNN_LINEAR(input, self.weight, self.bias, attr="none", scalars=[], algorithm="")
        return super().forward(input)


__all__ = ["LineageLinear"]
