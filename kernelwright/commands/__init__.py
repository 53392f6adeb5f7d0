"""One module per CLI verb. Each defines `register(subparsers)`, which adds its parser and sets
`func(args) -> int` as the parser default. `cli.py` owns argument parsing and error reporting."""

# The order here is the order of `kernelwright --help`.
COMMAND_MODULES = [
    "kernelwright.commands.problems",
    "kernelwright.commands.capture",
    "kernelwright.commands.optimize",
    "kernelwright.commands.eval",
    "kernelwright.commands.prompt",
    "kernelwright.commands.generate",
    "kernelwright.commands.bench",
    "kernelwright.commands.report",
    "kernelwright.commands.doctor",
]
