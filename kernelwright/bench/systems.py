"""The systems a bench compares. `eager` and `compile` are PyTorch itself (both timed by one reference
run per problem); `kernelwright` is our compiler, run through `kernelwright optimize`; `eager-copy` is the
A/A check: the problem's own Model judged as a candidate, so its speedup vs eager measures the judge's
timing error (DESIGN.md §7: 1.00 ± 0.03 on every problem); any other name is a folder of candidate files
named like the problems (`level1/19_ReLU.py`, or a raw `.md`/`.txt` LLM answer), whose system name is
the folder's basename."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelwright.errors import UsageError

REFERENCE_SYSTEMS = ("eager", "compile")
KERNELWRIGHT = "kernelwright"
AA_COPY = "eager-copy"
BUILT_IN = (*REFERENCE_SYSTEMS, KERNELWRIGHT, AA_COPY)
CANDIDATE_SUFFIXES = (".py", ".md", ".txt")


@dataclass(frozen=True)
class System:
    name: str
    kind: str                   # "reference", "kernelwright", "copy" (the A/A check) or "candidates"
    directory: Path | None = None

    def candidate_for(self, problem_id: str) -> Path | None:
        """The file answering `problem_id` in a candidates folder (`.py` preferred), or None."""
        assert self.directory is not None
        for suffix in CANDIDATE_SUFFIXES:
            path = self.directory / f"{problem_id}{suffix}"
            if path.is_file():
                return path
        return None


def parse_systems(spec: str) -> list[System]:
    """`eager,compile,kernelwright,path/to/answers` → systems, in the order given, without duplicates."""
    systems: list[System] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if item in REFERENCE_SYSTEMS:
            system = System(item, "reference")
        elif item == KERNELWRIGHT:  # always the compiler, even where a `kernelwright/` folder exists
            system = System(item, "kernelwright")
        elif item == AA_COPY:
            system = System(item, "copy")
        else:
            directory = Path(item)
            if not directory.is_dir():
                raise UsageError(f"--systems: {item!r} is neither eager, compile, kernelwright, {AA_COPY} "
                                 "nor a folder of candidate files")
            name = directory.resolve().name
            if name in BUILT_IN:
                raise UsageError(f"--systems: the candidates folder {item} is named like a built-in system; "
                                 "rename it (its basename is the system's name in the report)")
            system = System(name, "candidates", directory)
        if any(s.name == system.name for s in systems):
            raise UsageError(f"--systems: {system.name!r} is given twice (two folders with one basename?)")
        systems.append(system)
    if not systems:
        raise UsageError("--systems is empty; e.g. --systems eager,compile,kernelwright")
    return systems


def copy_candidate(problem_source: str) -> str:
    """The A/A candidate of a problem: its source, then `class ModelNew(Model)` with only a docstring."""
    return (problem_source.rstrip() + "\n\n\nclass ModelNew(Model):\n"
            '    """The reference Model itself, judged as a candidate: the bench\'s A/A timing check."""\n')
