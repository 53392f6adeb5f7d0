"""The systems a bench compares. `eager` and `compile` are PyTorch itself (both timed by one reference
run per problem); `kernelwright` is our compiler, run through `kernelwright optimize`; any other name is
a folder of candidate files named like the problems (`level1/19_ReLU.py`, or a raw `.md`/`.txt` LLM
answer), whose system name is the folder's basename."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelwright.errors import UsageError

REFERENCE_SYSTEMS = ("eager", "compile")
KERNELWRIGHT = "kernelwright"
CANDIDATE_SUFFIXES = (".py", ".md", ".txt")


@dataclass(frozen=True)
class System:
    name: str
    kind: str                   # "reference", "kernelwright" or "candidates"
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
        else:
            directory = Path(item)
            if not directory.is_dir():
                raise UsageError(f"--systems: {item!r} is neither eager, compile, kernelwright nor a folder "
                                 "of candidate files")
            name = directory.resolve().name
            if name in REFERENCE_SYSTEMS or name == KERNELWRIGHT:
                raise UsageError(f"--systems: the candidates folder {item} is named like a built-in system; "
                                 "rename it (its basename is the system's name in the report)")
            system = System(name, "candidates", directory)
        if any(s.name == system.name for s in systems):
            raise UsageError(f"--systems: {system.name!r} is given twice (two folders with one basename?)")
        systems.append(system)
    if not systems:
        raise UsageError("--systems is empty; e.g. --systems eager,compile,kernelwright")
    return systems
