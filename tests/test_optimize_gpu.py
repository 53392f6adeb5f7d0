"""`optimize` end to end on the GPU: the emitted file is judged correct and not slower than eager (or is
the whole-model fallback), and passes a plain KernelBench-style check in a process without kernelwright.

The default set takes a few minutes; `-m "gpu and slow"` runs every other bundled problem too."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys

import pytest
import torch

from kernelwright.compiler import SPEED_NOISE, OptimizeResult, optimize
from kernelwright.judge import JudgeOptions, evaluate
from kernelwright.judge.compare import compare_outputs, oracle_check
from kernelwright.problem import load_problem
from kernelwright.problem_files import bundled_problem_ids

pytestmark = pytest.mark.gpu

CORE = ["level1/01_ReLU", "level1/04_GELUTanh", "level1/13_Mish", "level2/07_Conv2dMishTanh",
        "level2/16_LinearSwishScaleClamp", "level3/05_GRUUnrolled"]
OTHERS = [pid for pid in bundled_problem_ids() if pid not in CORE]

PLAIN_CHECK = r'''
import importlib.util, sys, torch
sys.modules["kernelwright"] = None
spec = importlib.util.spec_from_file_location("new", sys.argv[1])
new = importlib.util.module_from_spec(spec); spec.loader.exec_module(new)
init = new.get_init_inputs()
torch.manual_seed(42); ref = new.Model(*init).cuda()
torch.manual_seed(42); cand = new.ModelNew(*init).cuda()
torch.manual_seed(7); inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in new.get_inputs()]
with torch.no_grad():
    want, got = ref(*inputs), cand(*inputs)
want, got = (want, got) if isinstance(want, (tuple, list)) else ([want], [got])
for w, g in zip(want, got):
    torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2)  # KernelBench's own check (the judge is stricter)
print("PLAIN-CHECK-OK")
'''


def check_problem(problem_id: str, tmp_path) -> OptimizeResult:
    """Optimize, judge, plain check; the emitted file is left at tmp_path / "new.py"."""
    result = optimize(load_problem(problem_id))
    output = tmp_path / "new.py"
    output.write_text(result.source)
    if result.fallback_reason is None:
        assert result.verdict["status"] == "correct", result.verdict["detail"]
        assert result.verdict["speedup_vs_eager"] >= 1 / (1 + SPEED_NOISE)
        assert result.build_seconds is not None
    verdict = evaluate(problem_id, output, JudgeOptions(compile_baseline=False))
    assert verdict["status"] == "correct", (result.fallback_reason, verdict["detail"])
    done = subprocess.run([sys.executable, "-c", PLAIN_CHECK, str(output)], capture_output=True, text=True,
                          timeout=900)
    assert "PLAIN-CHECK-OK" in done.stdout, done.stderr[-3000:]
    print(f"{problem_id}: {result.verification or result.fallback_reason}; dropped: {result.dropped}; "
          f"stages: {{{', '.join(f'{k}: {v:.1f} s' for k, v in result.stage_seconds.items())}}}")
    return result


@pytest.mark.parametrize("problem_id", CORE)
def test_optimize_core_problems(problem_id, tmp_path):
    check_problem(problem_id, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("problem_id", OTHERS)
def test_optimize_every_bundled_problem(problem_id, tmp_path):
    check_problem(problem_id, tmp_path)


# The GEMM -> GEMV rewrite leaves a reduced weight, recomputed on every call for a per-call matrix-vector
# product. (Every update path: tests/emit/test_weights_and_streams_gpu.py.)
DERIVED = ["level2/03_GemmDivideSumScale", "level2/12_LinearMeanScale"]


@pytest.mark.parametrize("problem_id", DERIVED)
def test_derived_weights_follow_the_weights(problem_id, tmp_path):
    result = check_problem(problem_id, tmp_path)
    assert result.fallback_reason is None and result.plan.derived, result.fallback_reason
    spec = importlib.util.spec_from_file_location("new", tmp_path / "new.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    problem = load_problem(problem_id)
    model = problem.build_model(0, "cuda")
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    inputs = problem.inputs(1, "cuda")

    def same() -> None:
        """The judge's rule: the tolerance table, else no less accurate than eager FP32 against float64 (the
        reduce-then-GEMV sums in another order: on the H100 8 of 8192 cancelling sums of level2/03 differ
        from eager by 2e-4, while the float64 oracle finds them as accurate)."""
        with torch.no_grad():
            want, got = model(*inputs), new(*inputs)
            if compare_outputs(want, got, "default")["status"] == "correct":
                return
            exact = copy.deepcopy(model).double()(*[x.double() for x in inputs])
        accepted, note = oracle_check(want, exact, got)
        assert accepted, note

    same()
    state = problem.build_model(5, "cuda").state_dict()
    model.load_state_dict(state)
    new.load_state_dict(state)
    same()
    for mine, theirs in zip(new.parameters(), model.parameters(), strict=True):
        mine.data.mul_(-0.5)        # through .data: no version counter moves
        theirs.data.mul_(-0.5)
    same()
    assert list(new.state_dict()) == list(model.state_dict())


# Small networks whose forward is many short steps: the compiler times the file with and without CUDA-graph
# replay and says in the header which it kept (tests/emit/test_replay_gpu.py: the replay itself).
REPLAY = ["level3/01_MLP", "level3/09_DepthwiseSeparableConvBlock"]


@pytest.mark.parametrize("problem_id", REPLAY)
def test_the_replay_choice_is_measured_and_judged(problem_id, tmp_path):
    result = check_problem(problem_id, tmp_path)
    if result.fallback_reason is None:
        (note,) = [n for n in result.notes if n.startswith("CUDA graph replay:")]
        assert "ms replayed vs" in note or "capture failed" in note, note
        assert note in result.source
        assert ("_kw_replay(self, ModelNew._kw_forward" in result.source) == note.startswith(
            "CUDA graph replay: on")
        print(f"{problem_id}: {note}")


def test_plans_are_ranked_by_their_graph_where_one_can_be_captured():
    """The layout ranking's graph (`_graph_of`): a replay recomputes into the captured memory; a step
    that synchronizes with the host cannot be captured and leaves the plain timing."""
    from kernelwright.compiler import _graph_of

    x = torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    replay = _graph_of(lambda: torch.mul(x, 2, out=out))
    x.fill_(3.0)
    replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(x, 6.0))
    assert _graph_of(lambda: x.sum().item()) is None
    torch.mul(x, 2, out=out)                 # the stream works after the failed capture
    torch.cuda.synchronize()
