"""Build GEMM kernels into an importable extension, for the GPU tests and the GEMM benchmark.

Each kernel's CUDA side is its own translation unit, so ninja compiles the CUTLASS instantiations in
parallel (one takes ~30 s of nvcc); the bindings share one C++ file. Emitted ModelNew files do not use
this: they carry their sources and load them with the emit stage's loader.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from kernelwright.codegen.binding import CPP_PRELUDE
from kernelwright.codegen.gemm import CUTLASS_NVCC_FLAGS
from kernelwright.codegen.kernel import KernelSource
from kernelwright.environment import cache_dir, cutlass_include_dir
from kernelwright.errors import KernelwrightError

DEVICE_HEADERS = Path(__file__).parent / "cuda"


def build_gemm_extension(sources: Sequence[KernelSource], verbose: bool = False) -> ModuleType:
    """Compile and import `sources`; the module exposes one function per `KernelSource.name`."""
    from torch.utils.cpp_extension import load

    sources = list({s.name: s for s in sources}.values())     # equal groups render to one kernel
    include = cutlass_include_dir()
    if include is None:
        raise KernelwrightError("the GEMM kernels need the CUTLASS headers: pip install nvidia-cutlass")
    digest = hashlib.sha1("".join(s.cuda + s.cpp for s in sources).encode()).hexdigest()[:12]
    name = f"kw_gemm_ext_{digest}"
    directory = cache_dir() / "gemm_build" / name
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for cuda in dict.fromkeys(s.cuda for s in sources):     # groups may share one instantiation
        path = directory / f"kernel_{len(files)}.cu"
        path.write_text(cuda)
        files.append(str(path))
    exports = "\n".join(f'  m.def("{s.name}", &{s.name});' for s in sources)
    binding = directory / "bindings.cpp"
    binding.write_text("\n".join([CPP_PRELUDE] + [s.cpp for s in sources])
                       + f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{exports}\n}}\n")
    return load(name=name, sources=[str(binding)] + files,
                extra_include_paths=[str(include), str(DEVICE_HEADERS)], extra_cflags=["-O2"],
                extra_cuda_cflags=["-O3", *CUTLASS_NVCC_FLAGS], build_directory=str(directory),
                verbose=verbose)
