"""`kernelwright` command line: parses arguments, dispatches to a command module, and turns errors into
one clear message (traceback only with --verbose). Exit codes: 0 ok, 1 a negative result (e.g. an
incorrect candidate), 2 usage or input errors, 3 internal errors."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from rich.console import Console
from rich.markup import escape

import kernelwright
from kernelwright.commands import COMMAND_MODULES
from kernelwright.errors import KernelwrightError

stderr = Console(stderr=True)


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
    try:
        return int(args.func(args) or 0)
    except KernelwrightError as exc:
        if args.verbose:
            traceback.print_exc()
        stderr.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        stderr.print("interrupted")
        return 130
    except Exception as exc:  # an internal bug: say so plainly
        if args.verbose:
            traceback.print_exc()
        stderr.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(str(exc))} "
                     "(rerun with --verbose for the traceback)", highlight=False)
        return 3


if __name__ == "__main__":
    sys.exit(main())
