"""`kernelwright doctor`: what this machine offers (torch, GPU, nvcc, CUTLASS, cache, runtime extension)."""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="check torch, the GPU, nvcc, CUTLASS headers and the cache")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kernelwright import bytecode
    from kernelwright.codegen.build import runtime_library
    from kernelwright.environment import CUTLASS_INSTALL, collect_environment

    env = collect_environment()
    runtime = runtime_library()
    env["runtime_extension"] = {"path": str(runtime), "built": runtime.is_file()}
    env["bytecode_cache"] = sys.pycache_prefix     # ours when the CLI found torch's own bytecode unusable
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    gpu = env["gpu"]
    rows = [
        ("kernelwright", env["kernelwright"]),
        ("python", env["python"]),
        ("torch", f"{env['torch']} (CUDA {env['torch_cuda'] or 'none'})"),
        ("CUDA available", "yes" if env["cuda_available"] else "no: GPU steps will be skipped"),
        ("GPU", f"{gpu['name']}, {gpu['sm_count']} SMs, sm_{gpu['capability'].replace('.', '')}, "
                f"{gpu['memory_gib']} GiB" if gpu else "none"),
        ("driver", env["driver"] or "-"),
        ("nvcc", f"{env['nvcc']} ({env['nvcc_version']})" if env["nvcc"]
                 else "not found: CUDA sources cannot be built"),
        ("CUTLASS headers", env["cutlass_include"] or f"not found ({CUTLASS_INSTALL})"),
        ("cache dir", env["cache_dir"]),
        ("bytecode", f"{sys.pycache_prefix} (torch's own is missing or stale)" if bytecode.in_use()
         else f"{sys.pycache_prefix} (PYTHONPYCACHEPREFIX)" if sys.pycache_prefix else "the install's own"),
        ("runtime extension", f"built: {runtime}" if runtime.is_file() else
         "not built yet: the first kernel build on this machine compiles it (10-15 s), then it is cached"),
    ]
    table = Table(title="kernelwright doctor", show_header=False)
    for key, value in rows:
        table.add_row(key, str(value))
    Console().print(table)
    return 0
