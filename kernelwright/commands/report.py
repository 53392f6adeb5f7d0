"""`kernelwright report RESULTS_DIR [--compare OTHER_DIR]`: re-render a bench's report.md, report.json
and plots from its results.jsonl, and show the delta against another run."""

from __future__ import annotations

from kernelwright.output_paths import add_force_flag, check_output_file, write_output_file


def register(subparsers) -> None:
    parser = subparsers.add_parser("report", help="re-render a bench report, or compare two bench runs")
    parser.add_argument("results", help="a folder written by `kernelwright bench`")
    parser.add_argument("--compare", metavar="OTHER_DIR", help="print the delta from this earlier run")
    parser.add_argument("-o", "--output", help="also write the comparison (Markdown) to this file")
    add_force_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console

    from kernelwright.bench.compare import render_comparison
    from kernelwright.bench.report import summary_tables, write_report
    from kernelwright.bench.store import require_results

    output = check_output_file(args.output, args.force) if args.output else None
    store = require_results(args.results)
    report = write_report(store)
    console = Console()
    if args.compare:
        other = require_results(args.compare)
        text = render_comparison(store.latest_rows(), other.latest_rows(),
                                 store.directory.name, other.directory.name)
        print(text, end="")
        if output is not None:
            write_output_file(output, text, args.force)
        return 0
    for table in summary_tables(report):
        console.print(table)
    console.print(f"report: {store.directory / 'report.md'}")
    return 0
