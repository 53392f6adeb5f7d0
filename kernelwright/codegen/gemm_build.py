"""Build GEMM kernels for the GPU tests and the GEMM benchmark.

Each kernel's CUDA side is its own translation unit, so ninja compiles the CUTLASS instantiations in
parallel (one takes ~30 s of nvcc) into one library; the shared runtime calls them. Emitted ModelNew files
do not use this: they carry their sources and build them with the recipe in `codegen/build.py`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from kernelwright.codegen.build import build_sharded
from kernelwright.codegen.gemm import CUTLASS_NVCC_FLAGS
from kernelwright.codegen.kernel import KernelSource
from kernelwright.environment import cutlass_include_dir
from kernelwright.errors import KernelwrightError

DEVICE_HEADERS = Path(__file__).parent / "cuda"


def build_gemm_extension(sources: Sequence[KernelSource]) -> object:
    """Compile and load `sources`; the result has one callable per `KernelSource.name`."""
    sources = list({s.name: s for s in sources}.values())     # equal groups render to one kernel
    include = cutlass_include_dir()
    if include is None:
        raise KernelwrightError("the GEMM kernels need the CUTLASS headers: pip install nvidia-cutlass")
    digest = hashlib.sha1("".join(s.text + repr(s.spec) for s in sources).encode()).hexdigest()[:12]
    name = f"kw_gemm_ext_{digest}"
    # One file per launcher (kernels that share an instantiation differ only in their entries, and the
    # include guard keeps the launcher once per file).
    by_launcher: dict[str, list[str]] = {}
    for source in sources:     # (a launcher compiled apart for emitted files is in `text`, include-guarded)
        by_launcher.setdefault(source.name.rsplit("_", 1)[0], []).append(source.text)
    return build_sharded(name, ["\n".join(texts) for texts in by_launcher.values()], sources,
                         include_dirs=[str(include), str(DEVICE_HEADERS)], cuda_flags=CUTLASS_NVCC_FLAGS)
