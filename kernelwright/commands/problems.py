"""`kernelwright problems [--level N]` lists the bundled suite; `kernelwright problems show ID` prints one.
Both read the problem files as text (descriptions from their docstrings, sizes from the bundled
`problems/estimates.json`): no problem is executed and torch is not imported."""

from __future__ import annotations

from kernelwright.errors import UsageError

# Below this width the description column is left out; ids, shapes and numbers never wrap.
WIDE = 140


def register(subparsers) -> None:
    parser = subparsers.add_parser("problems", help="list the bundled problems, or show one")
    parser.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    parser.add_argument("id", nargs="?", help="problem id for `show`, e.g. level1/01_ReLU")
    parser.add_argument("--level", type=int, help="only this level")
    parser.add_argument("--no-estimate", action="store_true", help="leave out the shape/FLOP estimates")
    parser.set_defaults(func=run)


def run(args) -> int:
    from kernelwright.problem_files import (
        bundled_levels,
        read_problem_source,
        resolve_problem_path,
    )

    if args.action == "show":
        if not args.id:
            raise UsageError("`kernelwright problems show` needs a problem id, e.g. level1/01_ReLU")
        print(read_problem_source(resolve_problem_path(args.id)), end="")
        return 0
    levels = bundled_levels()
    if args.level is not None and args.level not in levels:
        raise UsageError(f"--level {args.level}: no such level; the bundled levels are "
                         f"{', '.join(map(str, levels))}")
    _print_table(args.level, not args.no_estimate)
    return 0


def _print_table(level: int | None, with_estimates: bool) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from kernelwright.problem_files import (
        BUNDLED_DIR,
        bundled_categories,
        bundled_estimates,
        bundled_problem_ids,
        problem_description,
    )

    ids = bundled_problem_ids(level)
    categories = bundled_categories()
    estimates = bundled_estimates() if with_estimates else {}
    console = Console()
    wide = console.width >= WIDE
    # No vertical rules and one space between columns: the table fits 80 columns.
    table = Table(title=f"{len(ids)} bundled problems", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True, padding=(0, 1))
    table.add_column("id", no_wrap=True)
    table.add_column("category", no_wrap=True)
    if with_estimates:
        table.add_column("inputs", no_wrap=True)        # one shape per line
        table.add_column("GFLOP", justify="right", no_wrap=True)
        table.add_column("GB", justify="right", no_wrap=True)     # bytes moved at least once
    if wide:
        table.add_column("what it tests", overflow="fold")
    for problem_id in ids:
        row = [problem_id, categories.get(problem_id, "")]
        if with_estimates:
            row += _estimate_cells(estimates.get(problem_id))
        if wide:
            row.append(problem_description((BUNDLED_DIR / f"{problem_id}.py").read_text()))
        table.add_row(*row)
    console.print(table)


def _estimate_cells(entry: dict | None) -> list[str]:
    if entry is None:
        return ["?", "?", "?"]
    gflop = entry["gflop"]
    # Few digits, so that the table fits 80 columns with the longest ids and shapes.
    flop_text = "-" if not gflop else f"{gflop:.0f}" if gflop >= 100 else f"{gflop:.1f}"
    return ["\n".join(entry["inputs"]), flop_text, f"{entry['mbytes'] / 1e3:.1f}"]
