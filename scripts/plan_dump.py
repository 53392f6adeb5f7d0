"""The fusion plan of every bundled problem (NCHW, and channels-last where a layout choice exists), as the
text of `describe_plan`, in one JSON file; with a second file, the problems whose plans differ. CPU only
(capture, rewrite, plan: no build). A planner change is checked by the diff before and after it:

    python scripts/plan_dump.py /tmp/before.json            # on the old tree
    python scripts/plan_dump.py /tmp/after.json /tmp/before.json
"""

from __future__ import annotations

import json
import sys

from kernelwright.capture import capture
from kernelwright.compiler import _rewrite
from kernelwright.fuse.plan import describe_plan, plan_fusion
from kernelwright.problem import load_problem
from kernelwright.problem_files import bundled_problem_ids
from kernelwright.rewrite import hoistable_nodes
from kernelwright.rewrite.layout import channels_last, has_layout_choice


def plans() -> dict[str, str]:
    out = {}
    for problem_id in bundled_problem_ids():
        try:
            graph, _, derived = _rewrite(capture(load_problem(problem_id)))
            out[problem_id] = describe_plan(plan_fusion(graph, derived=list(derived)))
            if has_layout_choice(graph):
                other, _ = channels_last(graph)
                plan = plan_fusion(other, derived=list(hoistable_nodes(other)))
                out[f"{problem_id} [cl]"] = describe_plan(plan)
        except Exception as exc:  # a problem that does not plan is a line of the dump, not the end of it
            out[problem_id] = f"ERROR {type(exc).__name__}: {exc}"
    return out


def main(argv: list[str]) -> int:
    now = plans()
    with open(argv[1], "w") as handle:
        json.dump(now, handle, indent=1)
    print(f"{len(now)} plans -> {argv[1]}")
    if len(argv) > 2:
        with open(argv[2]) as handle:
            before = json.load(handle)
        for key in sorted(set(before) | set(now)):
            if before.get(key) != now.get(key):
                print(f"=== {key}\n--- before\n{before.get(key)}\n--- after\n{now.get(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
