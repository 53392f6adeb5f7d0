"""`kernelwright` command line: parses arguments, dispatches to a command module, and turns errors into
one clear message (traceback only with --verbose). Exit codes: 0 ok, 1 a negative result (e.g. an
incorrect candidate), 2 usage or input errors, 3 internal errors, 4 environment failures (out of GPU
memory held by other processes, after a retry: not a verdict on the code); a reader that closed the pipe early
(`kernelwright capture X --json | head`) ends the command quietly with 141, as a shell tool killed by
SIGPIPE would.

Start-up is kept light: `--version` and `--help` import neither torch nor rich (each command module
imports what it needs inside its `run`), so they answer in a fraction of a second.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

import kernelwright
from kernelwright.bytecode import use_bytecode_cache
from kernelwright.commands import COMMAND_MODULES
from kernelwright.errors import KernelwrightError
from kernelwright.gpulock import keep_off_timing_cpus

BROKEN_PIPE_EXIT = 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelwright",
        description="Make PyTorch models faster with custom CUDA kernels, automatically and verifiably.",
    )
    parser.add_argument("--version", action="version", version=f"kernelwright {kernelwright.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and build logs")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # before any command imports torch: bytecode kept across processes where the install cannot keep it
    use_bytecode_cache()
    keep_off_timing_cpus()   # where timings have CPUs of their own (gpulock.py): before any thread starts
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a closed pipe must end up in the handler below
        return code
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE_EXIT
    except KernelwrightError as exc:
        if args.verbose:
            traceback.print_exc()
        _print_error("error:", str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _print_error("", "interrupted")
        return 130
    except Exception as exc:  # an internal bug: say so plainly
        if args.verbose:
            traceback.print_exc()
        _print_error("internal error:",
                     f"{type(exc).__name__}: {exc} (rerun with --verbose for the traceback)")
        return 3


def _print_error(label: str, message: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    prefix = f"[bold red]{label}[/] " if label else ""
    # soft_wrap: one line however narrow the terminal (a pipe reads as 80 columns), for grep and logs.
    Console(stderr=True, soft_wrap=True).print(f"{prefix}{escape(message)}", highlight=False)


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and Python's own flush at exit would fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
