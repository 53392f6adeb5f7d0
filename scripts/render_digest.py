"""Hashes of every source the compiler generates without a GPU, to show that a refactor leaves them
byte-identical: each bundled problem (shrunk and full size, each layout variant) captured, rewritten,
planned, every group rendered and the whole ModelNew file emitted; every GEMM group also rendered with the
other kernel routes; and the hand-built graphs of tests/codegen (pool, reduction, pointwise cases, the GEMM
epilogue group).

    python scripts/render_digest.py OUT.json                 # write the hashes
    python scripts/render_digest.py OUT.json --compare A.json  # and list what differs from A.json

A failure (a capture or a renderer raising) is recorded as its message, so it is compared too.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "codegen"))

from kernelwright.capture import capture  # noqa: E402
from kernelwright.codegen.assemble import assemble  # noqa: E402
from kernelwright.codegen.registry import render_group  # noqa: E402
from kernelwright.emit import EmitInfo, emit_module  # noqa: E402
from kernelwright.fuse.gemm import BIG_TILE, SMALL_TILE, GemmConfig  # noqa: E402
from kernelwright.fuse.plan import FusedGroup, FusionPlan, plan_fusion  # noqa: E402
from kernelwright.ir.graph import Graph  # noqa: E402
from kernelwright.problem import load_problem  # noqa: E402
from kernelwright.problem_files import bundled_problem_ids  # noqa: E402
from kernelwright.rewrite import hoistable_nodes, rewrite_graph  # noqa: E402
from kernelwright.rewrite.layout import channels_last, has_layout_choice  # noqa: E402


def digest(text: str) -> str:
    """A source's hash; a failure's message as it is (readable in the JSON)."""
    return text if text.startswith("raised ") else hashlib.sha256(text.encode()).hexdigest()


def attempt(fn: Callable[[], str]) -> str:
    try:
        return fn()
    except Exception as exc:
        return f"raised {type(exc).__name__}: {exc}"


def rendered(group: FusedGroup) -> str:
    source = render_group(group)
    return "\0".join((source.name, source.cuda, repr(source.spec), source.ir_comment))


def gemm_routes(group: FusedGroup) -> Iterator[tuple[str, FusedGroup]]:
    """The group with each kernel route and tile shape, beside the one the rules chose."""
    config = group.config
    aligns = dict(align_a=config.align_a, align_b=config.align_b, align_c=config.align_c)
    routes = {"big": BIG_TILE._replace(**aligns), "small": SMALL_TILE._replace(**aligns),
              "streamk": SMALL_TILE._replace(swizzle="streamk", **aligns),
              "splitk": SMALL_TILE._replace(swizzle="streamk", split_k=3, **aligns),
              "tf32x3": GemmConfig(kernel="tf32x3", split_k=2, **aligns),
              "gemv": GemmConfig(kernel="gemv", **aligns)}
    for name, route in routes.items():
        yield name, dataclasses.replace(group, config=route)


def plan_digests(key: str, plan: FusionPlan, out: dict[str, str]) -> list:
    kernels = []
    for index, group in enumerate(plan.groups):
        out[f"{key}/group{index}:{group.family}"] = digest(attempt(lambda g=group: rendered(g)))
        if group.family == "gemm":
            for route, variant in gemm_routes(group):
                out[f"{key}/group{index}:gemm-{route}"] = digest(attempt(lambda g=variant: rendered(g)))
        try:
            kernels.append(render_group(group))
        except Exception:
            pass
    return kernels


def problem_digests(problem_id: str, shrink: bool, out: dict[str, str]) -> None:
    key = f"{problem_id}/{'shrunk' if shrink else 'full'}"
    try:
        problem = load_problem(problem_id)
        graph, _ = rewrite_graph(capture(problem, shrink=shrink))
    except Exception as exc:
        out[key] = digest(f"raised {type(exc).__name__}: {exc}")
        return
    variants = [("nchw", graph)]
    if has_layout_choice(graph):
        variants.append(("channels_last", channels_last(graph)[0]))
    info = EmitInfo(problem.id, False, "render digest", ())
    for layout, variant in variants:
        plan = plan_fusion(variant, derived=hoistable_nodes(variant))
        kernels = plan_digests(f"{key}/{layout}", plan, out)
        out[f"{key}/{layout}/emitted"] = digest(attempt(
            lambda p=plan, k=kernels: emit_module(problem.source, info, p, assemble(k), called=k)))


def case_graphs() -> Iterator[tuple[str, Graph, list | None]]:
    """(name, graph, matchers or None for all) of the hand-built codegen test cases."""
    import pool_cases
    import reduction_cases
    import test_pointwise

    from kernelwright.fuse import pointwise

    for name, build in pool_cases.CASES.items():
        yield f"pool/{name}", build(), None
    for name, build in reduction_cases.CASES.items():
        yield f"reduction/{name}", build(), None
    for case in test_pointwise.CASES:
        yield f"pointwise/{case.name}", case.graph, [pointwise.match]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, help="a JSON file written before: list the keys that differ")
    args = parser.parse_args()
    out: dict[str, str] = {}
    for name, graph, matchers in case_graphs():
        plan_digests(f"case/{name}", plan_fusion(graph, matchers), out)
    import test_gemm_render  # every epilogue operand kind, a transposed A, an odd N

    group = test_gemm_render.epilogue_group()
    for route, variant in [("chosen", group), *gemm_routes(group)]:
        out[f"case/gemm/epilogue_group:{route}"] = digest(attempt(lambda g=variant: rendered(g)))
    for problem_id in bundled_problem_ids():
        for shrink in (True, False):
            problem_digests(problem_id, shrink, out)
            print(f"{problem_id} {'shrunk' if shrink else 'full'}", file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    total = digest("".join(f"{k}={v}\n" for k, v in sorted(out.items())))
    print(f"{len(out)} sources, digest {total}")
    if args.compare:
        before = json.loads(args.compare.read_text())
        changed = sorted(k for k in before.keys() | out.keys() if before.get(k) != out.get(k))
        print(f"{len(changed)} differ from {args.compare}" + "".join(f"\n  {k}" for k in changed))
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
