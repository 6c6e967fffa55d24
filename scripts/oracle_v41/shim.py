"""Float64 shim for `ideal` mode.

The reference functions hard-code their working dtypes (`.float()`, `.bfloat16()`,
`torch.zeros(..., dtype=torch.float32)`) and some assert an input dtype. Inside
`with F64():` every request for a float32/bfloat16/float16 tensor made through a
conversion or a factory yields float64 instead, so a reference runs unchanged in
float64 without any of its bf16 roundings. `lie(x)` wraps a float64 tensor whose
`.dtype` reports bfloat16, for the refs that assert their input dtype
(TK swiglu_forward, tl/candidate_blocks.py:candidate_block_max_ref).
"""
import torch
from torch.overrides import TorchFunctionMode

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.tensor, torch.empty_like, torch.zeros_like,
              torch.ones_like, torch.full_like, torch.arange, torch.empty_strided, torch.randn}

class _DtypeLie(torch.Tensor):
    @property
    def dtype(self):
        real = super().dtype
        return torch.bfloat16 if real == torch.float64 else real

class F64(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.float, torch.Tensor.bfloat16, torch.Tensor.half):
            x = args[0]
            return x.to(torch.float64) if x.is_floating_point() else func(*args, **kwargs)
        if func is torch.Tensor.to:
            x = args[0]
            a = list(args)
            if x.is_floating_point():
                for i in range(1, len(a)):
                    if isinstance(a[i], torch.dtype) and a[i] in _FLOATS:
                        a[i] = torch.float64
                if kwargs.get("dtype") in _FLOATS:
                    kwargs["dtype"] = torch.float64
            return func(*a, **kwargs)
        if func in _FACTORIES and kwargs.get("dtype") in _FLOATS:
            kwargs["dtype"] = torch.float64
        out = func(*args, **kwargs)
        return out

def lie(x):
    return x.as_subclass(_DtypeLie)

def plain(x):
    return x.as_subclass(torch.Tensor) if isinstance(x, torch.Tensor) else x
