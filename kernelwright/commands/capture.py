"""`kernelwright capture PROBLEM [--json] [--shrink]` prints a problem's IR graph;
`kernelwright capture --stats SUITE_DIR` prints the op coverage of a suite."""

from __future__ import annotations

import json
from pathlib import Path

from kernelwright.errors import UsageError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "capture", help="export a problem to the IR and print it, or report op coverage"
    )
    parser.add_argument("problem", nargs="?", help="problem file or bundled id, e.g. level1/23_Softmax")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--shrink", action="store_true", help="capture the small CPU variant of the problem")
    parser.add_argument(
        "--stats", metavar="SUITE_DIR", help="op coverage of every problem file under SUITE_DIR"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from kernelwright.capture import capture
    from kernelwright.problem import load_problem

    if args.stats:
        if args.problem:
            raise UsageError("give either a PROBLEM or --stats SUITE_DIR, not both")
        return _stats(Path(args.stats), args.json)
    if not args.problem:
        raise UsageError("`kernelwright capture` needs a problem (file or bundled id) or --stats SUITE_DIR")
    graph = capture(load_problem(args.problem), shrink=args.shrink)
    print(graph.to_json_text() if args.json else str(graph))
    return 0


def _stats(suite_dir: Path, as_json: bool) -> int:
    from rich.console import Console
    from rich.table import Table

    from kernelwright.capture.coverage import problem_files, suite_coverage
    from kernelwright.ir.ops import category

    if not suite_dir.is_dir():
        raise UsageError(f"{suite_dir}: not a directory")
    files = problem_files(suite_dir)
    if not files:
        raise UsageError(f"{suite_dir}: no problem files (*.py) found")
    coverage = suite_coverage(files)
    if as_json:
        print(json.dumps(coverage.to_json(), indent=2))
        return 0
    console = Console()
    table = Table(title=f"IR op coverage: {coverage.captured}/{len(files)} problems captured")
    for column in ("op", "category", "kind", "nodes", "problems"):
        table.add_column(column, justify="right" if column in ("nodes", "problems") else "left")
    for op, count in coverage.native.most_common():
        table.add_row(op, category(op), "native", str(count), str(coverage.problems_using[op]))
    for target, count in coverage.fallback.most_common():
        table.add_row(
            target, "", "[yellow]aten_fallback[/]", str(count), str(coverage.problems_using[target])
        )
    console.print(table)
    native, fallback = sum(coverage.native.values()), sum(coverage.fallback.values())
    console.print(
        f"native: {native} node occurrences, aten_fallback: {fallback}, "
        f"native share: {coverage.native_share:.1%}",
        highlight=False,
    )
    for problem, message in coverage.failures:
        console.print(f"[red]not captured[/] {problem}: {message}", highlight=False)
    return 0
