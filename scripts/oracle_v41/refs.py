"""Import DeepSeek's reference code (DeepInfer 0.1.0, deepinfer-gemm 2.8.2, FlashMLA 1.0.0
python+docs, tile-kernels 2.1.0) on a CPU-only machine.

Nothing here is a copy of reference code: the sdists (PyPI's deepinfer 0.1.0,
deepinfer-gemm 2.8.2 and the Python + docs of deepinfer-flashmla 1.0.0, whose
metadata cannot be built without CUDA, so pip cannot download them: fetch the
files as they are into a folder of your choice) are read from $DEEPINFER_REF_DIR,
checked against the pins in scripts/oracle_v41/SHA256SUMS, unpacked, put on
sys.path, and imported. The CUDA-only packages the DeepInfer
model code imports at module level are replaced by MagicMock modules
(notes/v41_forward_and_oracle.md, appendix); the process-group accessors are
patched to a size-1 group.

Use:  from oracle_v41 import refs;  refs.setup();  refs.TK.mhc_post_ref(...)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import tarfile
import types
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
REF_DIR = Path(os.environ["DEEPINFER_REF_DIR"]) if os.environ.get("DEEPINFER_REF_DIR") else None
SUMS = Path(__file__).resolve().parent / "SHA256SUMS"
SDISTS = {
    "deepinfer": "deepinfer-0.1.0.tar.gz",
    "deepinfer_gemm": "deepinfer_gemm-2.8.2.tar.gz",
    "flashmla": "deepinfer_flashmla-1.0.0-python-and-docs.tar.gz",
}
TK_WHEEL = "tile_kernels-2.1.0-py3-none-any.whl"

STUB_PREFIXES = (
    "flash_attn",
    "deep_gemm",
    "flash_mla",
    "deep_ep",
    "deep_select",
    "deepinfer._C",
    "xgrammar",
    "kernelkit",
    "torch_npu",
)


def cache_dir() -> Path:
    """Where the sdists are unpacked: <venv>/ref (sys.prefix of the running venv), or $ORACLE_V41_CACHE."""
    env = os.environ.get("ORACLE_V41_CACHE")
    return Path(env) if env else Path(sys.prefix) / "ref"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expected_sums() -> dict[str, str]:
    sums = {}
    for line in SUMS.read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name] = digest
    return sums


def unpack() -> dict[str, Path]:
    """Verify and unpack the three sdists (once); returns {name: unpacked root}."""
    if REF_DIR is None:
        raise RuntimeError("set DEEPINFER_REF_DIR to the folder holding " + ", ".join(SDISTS.values())
                           + " (pinned in scripts/oracle_v41/SHA256SUMS)")
    sums = expected_sums()
    out = cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    roots = {}
    for key, fname in SDISTS.items():
        src = REF_DIR / fname
        digest = sums[fname]
        stamp = out / (fname + ".sha256")
        top = fname.removesuffix(".tar.gz").removesuffix("-python-and-docs")
        root = out / top
        if not (stamp.is_file() and stamp.read_text().strip() == digest and root.is_dir()):
            got = sha256_of(src)
            if got != digest:
                raise RuntimeError(f"{src}: sha256 {got} != SHA256SUMS {digest}")
            with tarfile.open(src) as tar:
                tar.extractall(out, filter="data")
            stamp.write_text(digest + "\n")
        roots[key] = root
    return roots


class _StubModule(types.ModuleType):
    """A package whose every attribute is a MagicMock (stands in for a CUDA-only package)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__ = []  # a package: submodules resolve through the finder too
        self.__file__ = f"<stub {name}>"

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        value = mock.MagicMock(name=f"{self.__name__}.{item}")
        setattr(self, item, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in STUB_PREFIXES):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


class _Group:
    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


_STATE: dict = {}


def load_by_path(name: str, path: Path) -> types.ModuleType:
    """Import one file as module `name` (for deep_gemm's pure-python test references)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def setup() -> types.SimpleNamespace:
    """Idempotent: unpack, stub, import. Returns a namespace of the reference modules."""
    if "ns" in _STATE:
        return _STATE["ns"]
    roots = unpack()
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, str(roots["deepinfer"]))
    os.environ.setdefault("TORCHINDUCTOR_DISABLE", "1")

    import torch  # noqa: F401
    import tile_kernels  # noqa: F401  (the wheel, installed --no-deps)
    import tile_kernels.torch as TK

    from deepinfer.model_executor.parallel_utils import parallel_state

    pg_type = type(parallel_state.PG)
    group = _Group()
    for accessor in ("context_parallel_group", "expert_parallel_group", "engram_parallel_group",
                     "data_parallel_group", "world_group", "cpu_data_parallel_group"):
        setattr(pg_type, accessor, lambda self, _g=group: _g)
    pg_type.is_within_nvl_domain = staticmethod(lambda group: True)
    pg_type.get_rank = lambda self: 0

    # The vision tower allocates on CUDA in __init__; V4.1 text tests need none of it
    # (the HF loader plans the language container only).
    from deepinfer.model_executor.models.vision_encoder import mlp_projector, vit

    class _NoVision(torch.nn.Module):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__()

    vit.VisionTransformer = _NoVision
    mlp_projector.MlpProjector = _NoVision

    from deepinfer.hugging_face import config as hf_config
    from deepinfer.hugging_face import loading as hf_loading
    from deepinfer.hugging_face import weights as hf_weights
    from deepinfer.model_executor.layers.tilelang_ops import cache_common, candidate_blocks, compress
    from deepinfer.model_executor.models.v4_modules import cross_layer, engram_metadata

    dg_root = roots["deepinfer_gemm"]
    dg_mhc = load_by_path("_dg_test_mega_mhc", dg_root / "tests" / "test_mega_mhc.py")
    dg_attn = load_by_path("_dg_test_attention", dg_root / "tests" / "test_attention.py")
    dg_math = load_by_path("_dg_utils_math", dg_root / "deep_gemm" / "utils" / "math.py")

    ns = types.SimpleNamespace(
        roots=roots,
        TK=TK,
        tile_kernels=tile_kernels,
        hf_config=hf_config,
        hf_loading=hf_loading,
        hf_weights=hf_weights,
        cache_common=cache_common,
        candidate_blocks=candidate_blocks,
        compress=compress,
        cross_layer=cross_layer,
        engram_metadata=engram_metadata,
        dg_mhc=dg_mhc,
        dg_attn=dg_attn,
        dg_math=dg_math,
    )
    _STATE["ns"] = ns
    return ns


def versions() -> dict[str, str]:
    import numpy
    import tokenizers
    import torch

    sums = expected_sums()
    from importlib.metadata import version

    return {
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "tokenizers": tokenizers.__version__,
        "tile_kernels": version("tile-kernels"),
        "tilelang": version("tilelang"),
        "deepinfer_sdist": SDISTS["deepinfer"],
        "deepinfer_sha256": sums[SDISTS["deepinfer"]],
        "deepinfer_gemm_sha256": sums[SDISTS["deepinfer_gemm"]],
        "flashmla_sha256": sums[SDISTS["flashmla"]],
        "tile_kernels_wheel_sha256": sums[TK_WHEEL],
    }
