"""CUDA-graph replay (emit/replay.py) on the GPU, with emitted files whose forward replays a graph: the answer
equals Model's on every call and after every way of changing the parameters (`update_paths.py`, writes
through `param.data` and `p.data = t` included); outputs are fresh tensors and new values in an input's
storage are read; two instances and two streams at once are each right; a train-mode BatchNorm's running
statistics move exactly as eager's, once per call; and, printed with `-s`, the time step by step and
replayed on a launch-bound problem."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from side_streams import alternate_on_side_streams
from test_emit import GPU_PROBLEM, emitted
from update_paths import UPDATES

pytestmark = pytest.mark.gpu


def load(problem_id, tmp_path_factory, rewrite=False):
    problem, plan, kernels, source = emitted(problem_id, rewrite=rewrite, replay=True)
    path = tmp_path_factory.mktemp("replay") / "new.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"replay_{abs(hash(str(problem_id)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._kw_ext is not None and module._KW_REPLAY
    return problem, module


@pytest.fixture(scope="module")
def state_heavy(tmp_path_factory):
    """3xTF32 weight splits, derived weights, a split-row reduction, a softmax, pointwise kernels."""
    return load(GPU_PROBLEM, tmp_path_factory, rewrite=True)


def replayed(module, model) -> bool:
    runner = module._kw_runner(model)
    assert runner.failure is None, runner.failure
    return bool(runner.entries)


def assert_same(got, want, msg):
    got, want = (got, want) if isinstance(want, (tuple, list)) else ([got], [want])
    for g, w in zip(got, want, strict=True):
        atol = 1e-4 * max(1.0, w.abs().max().item())
        torch.testing.assert_close(g, w, rtol=1e-4, atol=atol, msg=lambda m: f"{msg}: {m}")


def test_every_call_and_every_update_path(state_heavy):
    problem, module = state_heavy
    model = problem.build_model(0, "cuda")
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    inputs = problem.inputs(1, "cuda")

    def check(msg):
        with torch.no_grad():
            for call in range(3):   # eager + capture, then replays
                assert_same(new(*inputs), model(*inputs), f"{msg}, call {call}")

    check("before any update")
    assert replayed(module, new)
    for seed, (how, update) in enumerate(UPDATES.items(), start=1):
        update(model, 100 * seed)
        update(new, 100 * seed)
        check(f"after {how}")


def warmed_up(state_heavy):
    """(module, a ModelNew whose direct graph reads batch a, batch a, batch b, Model's answers on a and b)."""
    problem, module = state_heavy
    model = problem.build_model(0, "cuda")
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    a, b = problem.inputs(1, "cuda"), problem.inputs(2, "cuda")
    with torch.no_grad():
        want_a, want_b = model(*a), model(*b)
        new(*a), new(*a)
    return module, new, a, b, want_a, want_b


def test_outputs_are_fresh_and_inputs_are_read_anew(state_heavy):
    module, new, a, b, want_a, want_b = warmed_up(state_heavy)
    with torch.no_grad():
        first = new(*a)
        for x, y in zip(a, b, strict=True):       # the same storage, new values
            if isinstance(x, torch.Tensor):
                x.copy_(y)
        second = new(*a)
        other = [x.clone() if isinstance(x, torch.Tensor) else x for x in a]   # elsewhere: the copying graph
        third = new(*other)
    assert replayed(module, new)
    (entry,) = module._kw_runner(new).entries.values()
    assert entry.copying
    assert_same(third, want_b, "the same values at another address")
    assert_same(first, want_a, "the first output, after a later call")
    assert_same(second, want_b, "new values in the same input storage")
    pointers = {t.data_ptr() for out in (first, second) for t in (out if isinstance(out, tuple) else [out])}
    assert len(pointers) == 2 * (len(first) if isinstance(first, tuple) else 1)


def test_held_results_stay_and_dropped_ones_are_lent_again(state_heavy):
    """Every result kept (new values in the same input storage each call) stays right; a loop that drops
    its results gets the graph's own output memory (lent, not copied)."""
    problem, module = state_heavy
    model = problem.build_model(0, "cuda")
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    x = problem.inputs(1, "cuda")
    kept = []
    with torch.no_grad():
        for seed in range(6):
            for arg, value in zip(x, problem.inputs(10 + seed, "cuda"), strict=True):
                if isinstance(arg, torch.Tensor):
                    arg.copy_(value)
            kept.append((new(*x), model(*x)))
        for call, (got, want) in enumerate(kept):
            assert_same(got, want, f"result {call}, kept while later calls ran")
        (entry,) = module._kw_runner(new).entries.values()
        assert [g.lent for g in entry.direct] == [True] * module._KW_LENT_SETS + [False]
        kept.clear()
        out = new(*x)
        first = out[0] if isinstance(out, tuple) else out
        assert any(first.data_ptr() == g.tensors[0].data_ptr() for g in entry.direct if g.lent)


def test_arguments_that_settle_elsewhere_get_the_direct_graph_again(state_heavy):
    """The second call in a row at new addresses runs eagerly and moves the direct graph there (a timing
    loop on other tensors than the first calls' stops paying the copy); addresses that keep moving use the
    copying graph, and at most _KW_RECAPTURES captures are made per key."""
    module, new, a, b, want_a, want_b = warmed_up(state_heavy)
    with torch.no_grad():
        (entry,) = module._kw_runner(new).entries.values()
        assert_same(new(*b), want_b, "first call elsewhere (copying graph)")
        assert entry.copying and entry.recaptures == 0
        assert_same(new(*b), want_b, "second call there (eager, then the direct graph moves)")
        assert entry.recaptures == 1 and entry.pointers == tuple(t.data_ptr() for t in b
                                                                 if isinstance(t, torch.Tensor))
        assert_same(new(*b), want_b, "replayed where the arguments settled")
        assert_same(new(*a), want_a, "back at the first addresses: copying graph")
        for round_ in range(2 * module._KW_RECAPTURES):
            batch, want = (a, want_a) if round_ % 2 else (b, want_b)
            assert_same(new(*batch), want, f"settling round {round_}")
            assert_same(new(*batch), want, f"settling round {round_}, again")
        assert entry.recaptures == module._KW_RECAPTURES
    assert replayed(module, new)


def test_two_instances_on_two_streams(state_heavy):
    problem, module = state_heavy
    model = problem.build_model(0, "cuda")
    news = [problem.build_model(0, "cuda", model_class=module.ModelNew) for _ in range(2)]
    batches = [problem.inputs(seed, "cuda") for seed in (1, 2)]
    with torch.no_grad():
        expected = [model(*inputs) for inputs in batches]
        # per stream and round: its own instance, then a shared one (one graph per stream)
        results = alternate_on_side_streams(
            [lambda k=k: (news[k](*batches[k]), news[0](*batches[k])) for k in range(2)], rounds=5)
    for k in range(2):
        for i, (own, shared) in enumerate(results[k]):
            assert_same(own, expected[k], f"stream {k}, own instance, call {i}")
            assert_same(shared, expected[k], f"stream {k}, shared instance, call {i}")
    assert replayed(module, news[0]) and replayed(module, news[1])


@pytest.mark.parametrize("problem_id", ["level1/28_BatchNorm2dTrain", "level3/02_ResidualConvBlock"])
def test_train_mode_batch_norm_moves_once_per_call(problem_id, tmp_path_factory):
    problem, module = load(problem_id, tmp_path_factory)
    model = problem.build_model(0, "cuda")
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    with torch.no_grad():
        for call in range(4):
            inputs = problem.inputs(call, "cuda")
            assert_same(new(*inputs), model(*inputs), f"call {call}")
            for (name, want), (_, got) in zip(model.state_dict().items(), new.state_dict().items(),
                                              strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5,
                                           msg=lambda m, n=name, c=call: f"{n} after call {c}: {m}")
    assert replayed(module, new)


def test_grad_mode_with_grad_inputs_runs_step_by_step(state_heavy):
    problem, module = state_heavy
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    inputs = [x.requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in problem.inputs(1, "cuda")]
    new(*inputs)
    assert not module._kw_runner(new).entries


def test_print_step_by_step_against_replayed(tmp_path_factory):
    """Not an assertion: the per-call time of a small MLP both ways (a launch-bound forward)."""
    problem, module = load("level3/01_MLP", tmp_path_factory, rewrite=True)
    new = problem.build_model(0, "cuda", model_class=module.ModelNew)
    inputs = problem.inputs(0, "cuda")
    times = {}
    with torch.no_grad():
        for mode in (False, True):
            module._KW_REPLAY = mode
            for _ in range(3):
                new(*inputs)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(100):
                new(*inputs)
            end.record()
            end.synchronize()
            times[mode] = start.elapsed_time(end) / 100
    print(f"\nlevel3/01_MLP (shrunk): step by step {times[False]:.3f} ms, replayed {times[True]:.3f} ms")


def _runtime():
    from kernelwright.emit.replay import REPLAY_SOURCE
    namespace = {"torch": torch}
    exec(REPLAY_SOURCE, namespace)  # noqa: S102
    return namespace


class _Plain(torch.nn.Module):
    pass


def _scratchy(model, x):
    """A forward with scratch memory the size of its output (a graph's intermediates)."""
    t1 = x * 2
    t2 = t1 + 1
    del t1
    return t2 * 3


def test_lent_outputs_survive_other_graphs_of_the_key():
    """A review's sequence: the direct graph, a copying graph whose output would lie in the direct graph's
    scratch were they one pool, the direct graph replayed while that output is held; and a loop holding its
    previous result. Every result held stays right."""
    rt, model = _runtime(), _Plain()
    x, x2 = (torch.randn(1 << 20, device="cuda") for _ in range(2))
    call = lambda a: rt["_kw_replay"](model, _scratchy, lambda m: (), (a,))   # noqa: E731
    call(x)
    held = call(x2)                      # the copying graph
    call(x)                              # the direct graph, replayed
    torch.cuda.synchronize()
    torch.testing.assert_close(held, (x2 * 2 + 1) * 3)
    previous, want = None, None
    for k in range(8):
        x.fill_(float(k))
        y = call(x)
        if previous is not None:
            torch.testing.assert_close(previous, want)
        previous, want = y, torch.full_like(x, 3.0 * (2 * k + 1))
    torch.testing.assert_close(previous, want)
    # held across the direct graph moving to new addresses (recapture) and its replays there
    x2.fill_(1.0)
    call(x2), call(x2)
    moved = [call(x2) for _ in range(3)]
    torch.cuda.synchronize()
    torch.testing.assert_close(previous, want)
    for out in moved:
        torch.testing.assert_close(out, torch.full_like(x2, 9.0))
    assert rt["_kw_replay_failure"](model) is None
    (entry,) = rt["_kw_runner"](model).entries.values()
    assert entry.recaptures == 1
