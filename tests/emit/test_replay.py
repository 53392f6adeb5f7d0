"""CUDA-graph replay in emitted files (emit/replay.py), the parts a CPU can check: what the file holds, that
KernelBench's static checker still passes it, which forwards the compiler keeps off replay, and that the
runtime's guard sends every call a graph could get wrong down the step-by-step path. The graphs themselves
are tested on the GPU (test_replay_gpu.py)."""

from __future__ import annotations

import ast

import pytest
import torch
from test_emit import emitted

from kernelwright.capture import capture
from kernelwright.compiler import _replay_unsafe
from kernelwright.emit.replay import REPLAY_SOURCE
from kernelwright.judge.kernelbench import kernelbench_static
from kernelwright.problem import load_problem


def test_replay_file_passes_kernelbench_static_checks_and_names_its_state():
    _, plan, _, source = emitted("level3/08_SqueezeExcitationBlock", replay=True)
    ast.parse(source)
    verdict = kernelbench_static(source)
    assert verdict["passes_strict"], verdict["strict"]
    assert "_KW_REPLAY = True" in source and "def _kw_forward(self, x):" in source
    state = source[source.index("def _kw_state(self):"):]
    for param in plan.graph.params:
        assert f"self.{param.name.split('.')[0]}" in state


def test_step_file_has_no_replay_runtime():
    _, _, _, source = emitted("level3/08_SqueezeExcitationBlock")
    assert "_kw_replay" not in source and "_KW_REPLAY" not in source


DROPOUT_PROBLEM = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return torch.relu(self.drop(x))


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
"""


def test_random_ops_keep_replay_off(tmp_path):
    path = tmp_path / "dropout.py"
    path.write_text(DROPOUT_PROBLEM)
    assert "random op" in _replay_unsafe(capture(load_problem(path)))
    assert _replay_unsafe(capture(load_problem("level1/05_SiLU"))) is None


class _Model(torch.nn.Module):
    pass


@pytest.mark.parametrize("args", [
    (torch.zeros(2),),                                   # on the CPU
    (torch.zeros(2, requires_grad=True),),               # gradients wanted
    ([1, 2],),                                           # unhashable
    (3,),                                                # no tensor at all
], ids=["cpu", "requires_grad", "unhashable", "no_tensor"])
def test_calls_a_graph_could_get_wrong_run_step_by_step(args):
    namespace = {"torch": torch}
    exec(REPLAY_SOURCE, namespace)  # noqa: S102
    assert namespace["_kw_replay_key"](_Model(), args) is None
    calls = []
    result = namespace["_kw_replay"](_Model(), lambda model, *a: calls.append(a) or "stepped", None, args)
    assert result == "stepped" and calls == [args]


def test_expanded_views_are_not_dense():
    namespace = {"torch": torch}
    exec(REPLAY_SOURCE, namespace)  # noqa: S102
    assert not namespace["_kw_dense"](torch.zeros(3, 1).expand(3, 4))
    assert namespace["_kw_dense"](torch.zeros(3, 4).t())
    assert namespace["_kw_dense"](torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last))


# ---- lent outputs, on the CPU: a stand-in for CUDA graphs with their semantics (a replay recomputes the
# captured call into the same static outputs, overwriting what a caller may still hold)

class _Graph:
    capturing = None
    captures: list = []      # (pool, graph) in capture order
    fail = False             # the next captures raise

    def __init__(self):
        self.replays, self.call, self.outputs, self.pool_id = 0, None, None, None

    def replay(self):
        self.replays += 1
        for static, fresh in zip(self.outputs, self.call(), strict=True):
            static.copy_(fresh)

    def pool(self):
        return self.pool_id


class _Capture:
    def __init__(self, graph, pool=None, capture_error_mode=None):
        self.graph = graph
        graph.pool_id = pool if pool is not None else object()
        _Graph.captures.append((graph.pool_id, graph))

    def __enter__(self):
        _Graph.capturing = self.graph

    def __exit__(self, *exc):
        _Graph.capturing = None
        return False


class _Torch:
    """torch, with torch.cuda's graphs replaced by _Graph."""
    free_bytes = 1 << 40
    cuda = type("cuda", (), {"CUDAGraph": _Graph, "graph": _Capture,
                             "is_current_stream_capturing": staticmethod(lambda: False),
                             "memory_reserved": staticmethod(lambda device=None: 0),
                             "mem_get_info": staticmethod(lambda device=None: (_Torch.free_bytes, 1 << 40)),
                             "synchronize": staticmethod(lambda: None),
                             "empty_cache": staticmethod(lambda: None),
                             "current_stream": staticmethod(lambda: "stream"),
                             "set_stream": staticmethod(lambda stream: None)})

    def __getattr__(self, name):
        return getattr(torch, name)


def _lending_runtime():
    namespace = {"torch": _Torch()}
    exec(REPLAY_SOURCE, namespace)  # noqa: S102
    namespace["_kw_replay_key"] = lambda model, args: ("key", tuple(a.shape for a in args))
    return namespace


def _forward(alias_input=False):
    """A forward (x -> (2x + 1, x.sum())) that registers itself with the graph being captured."""
    def compute(x):
        return (x if alias_input else 2 * x + 1), x.sum().reshape(1)

    def forward(model, x):
        if _Graph.capturing is not None:
            if _Graph.fail:
                raise RuntimeError("capture failed")
            # a capture runs nothing: its outputs hold garbage until a replay
            _Graph.capturing.call = lambda: compute(x)
            garbage = [t if t.data_ptr() == x.data_ptr() else torch.full_like(t, float("nan"))
                       for t in compute(x)]
            _Graph.capturing.outputs = tuple(garbage)
            return _Graph.capturing.outputs
        return compute(x)
    return forward


def _graphs(namespace, model):
    (entry,) = namespace["_kw_runner"](model).entries.values()
    return entry.direct


def test_lent_outputs_are_never_overwritten_while_held():
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(), torch.zeros(5)
    call = lambda: rt["_kw_replay"](model, forward, lambda m: (), (x,))   # noqa: E731
    kept = []
    for k in range(8):                        # keep every result: each stays what it was
        x.fill_(k)
        kept.append((k, call()))
    for k, (y, s) in kept:
        assert torch.equal(y, torch.full((5,), 2.0 * k + 1)) and s.item() == 5 * k
    graphs = _graphs(rt, model)
    assert [g.lent for g in graphs] == [True] * rt["_KW_LENT_SETS"] + [False]
    assert graphs[-1].graph.replays > 0             # once every lent set is held: copies of the last graph


def test_a_loop_holding_the_last_result_takes_the_lent_graphs_in_turn():
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(), torch.zeros(5)
    previous = None
    for k in range(10):
        x.fill_(k)
        y, _ = rt["_kw_replay"](model, forward, lambda m: (), (x,))
        assert torch.equal(y, torch.full((5,), 2.0 * k + 1))
        if previous is not None:
            assert torch.equal(previous, torch.full((5,), 2.0 * k - 1)), "the held result was overwritten"
        previous = y
    graphs = _graphs(rt, model)
    assert len(graphs) == rt["_KW_LENT_SETS"] and all(g.lent for g in graphs)
    assert sum(g.graph.replays for g in graphs) == 10 - 1      # all but the first call (eager, then capture)
    # a dropped result's memory is lent again, not copied
    del previous, y
    x.fill_(3)
    y, _ = rt["_kw_replay"](model, forward, lambda m: (), (x,))
    assert any(y.data_ptr() == g.outputs[0].data_ptr() for g in graphs)


def test_outputs_sharing_memory_with_an_argument_are_copied_out():
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(alias_input=True), torch.zeros(5)
    for _ in range(4):
        y, _ = rt["_kw_replay"](model, forward, lambda m: (), (x,))
    (graph,) = _graphs(rt, model)
    assert not graph.lent and graph.graph.replays == 3 and y.data_ptr() != x.data_ptr()


def test_a_lent_output_resized_by_its_caller_is_never_replayed_into():
    """`resize_` of an alias moves the shared storage: the graph would write where it no longer is."""
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(), torch.zeros(5)
    call = lambda: rt["_kw_replay"](model, forward, lambda m: (), (x,))   # noqa: E731
    call()
    y, s = call()                                   # lent by the first graph
    first = _graphs(rt, model)[0]
    y.resize_(10_000)
    del y, s
    assert not first.free()
    x.fill_(2)
    z, _ = call()
    assert torch.equal(z, torch.full((5,), 5.0)) and first.graph.replays == 1


def test_each_lent_graph_is_the_first_of_its_own_pool():
    """A graph captured later into a pool may get an earlier graph's scratch for its outputs (which that
    graph's replay overwrites): lent graphs never share a pool, and copied-out ones join the key's."""
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(), torch.zeros(5)
    _Graph.captures = []
    kept = [rt["_kw_replay"](model, forward, lambda m: (), (x,)) for _ in range(5)]
    other = torch.zeros(5)
    kept += [rt["_kw_replay"](model, forward, lambda m: (), (other,)) for _ in range(1)]  # copying graph
    (entry,) = rt["_kw_runner"](model).entries.values()
    lent = [g for g in entry.direct + entry.copying if g.lent]
    copied = [g for g in entry.direct + entry.copying if not g.lent]
    assert len(lent) == rt["_KW_LENT_SETS"] and len(copied) == 2 and not any(g.lent for g in entry.copying)
    first_in_pool = {}
    for pool, graph in _Graph.captures:
        first_in_pool.setdefault(id(pool), graph)
    assert all(first_in_pool[id(g.graph.pool())] is g.graph for g in lent)
    assert len({id(g.graph.pool()) for g in lent}) == len(lent)
    assert all(g.graph.pool() is entry.pool for g in copied)


def test_the_copying_graph_reads_its_static_inputs_and_copies_out():
    rt, model, forward = _lending_runtime(), _Model(), _forward()
    x, elsewhere = torch.zeros(5), torch.zeros(5)
    call = lambda a: rt["_kw_replay"](model, forward, lambda m: (), (a,))   # noqa: E731
    call(x), call(x)
    results = []
    for k in range(4):                       # arguments at other addresses (never twice in a row)
        fresh = torch.full((5,), float(k))
        if k % 2 == 0:
            elsewhere.copy_(fresh)
        results.append((k, call(elsewhere if k % 2 == 0 else fresh)))
    for k, (y, s) in results:
        assert torch.equal(y, torch.full((5,), 2.0 * k + 1)) and s.item() == 5 * k
    (entry,) = rt["_kw_runner"](model).entries.values()
    assert entry.copying and not any(g.lent for g in entry.copying)


def test_outputs_sharing_memory_with_a_parameter_are_copied_out():
    rt, model, x = _lending_runtime(), _Model(), torch.zeros(5)
    weight = torch.ones(5)

    def forward(model, x):
        out = (weight[:], x.sum().reshape(1))        # the parameter itself, as a view
        if _Graph.capturing is not None:
            _Graph.capturing.call = lambda: (weight[:], x.sum().reshape(1))
            _Graph.capturing.outputs = out
        return out
    for _ in range(3):
        rt["_kw_replay"](model, forward, lambda m: (weight,), (x,))
    assert not _graphs(rt, model)[0].lent


def test_no_more_lent_graphs_without_room_for_their_pool():
    """A second lent graph needs twice the first one's pool free; else the held result is left alone and a
    graph sharing the first pool copies its outputs out."""
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(), torch.zeros(5)
    call = lambda: rt["_kw_replay"](model, forward, lambda m: (), (x,))   # noqa: E731
    call()
    held = call()                            # lent by the first graph
    (first,) = _graphs(rt, model)
    first.footprint, _Torch.free_bytes = 1 << 30, 1 << 30
    try:
        x.fill_(4)
        y, _ = call()
    finally:
        _Torch.free_bytes = 1 << 40
    graphs = _graphs(rt, model)
    assert [g.lent for g in graphs] == [True, False] and graphs[1].graph.pool() is first.graph.pool()
    assert torch.equal(y, torch.full((5,), 9.0)) and torch.equal(held[0], torch.full((5,), 1.0))


def test_a_recaptured_direct_graph_lends_from_a_pool_of_its_own():
    """Arguments that settle at new addresses move the direct graph (recapture): the new lent graph is the
    first of a new pool, while the copying graph stays in the first one; a result lent before stays."""
    rt, model, forward = _lending_runtime(), _Model(), _forward()
    x, other = torch.zeros(5), torch.zeros(5)
    call = lambda a: rt["_kw_replay"](model, forward, lambda m: (), (a,))   # noqa: E731
    _Graph.captures = []
    call(x)
    x.fill_(1)
    old, _ = call(x)                          # lent by the first direct graph
    other.fill_(2)
    call(other), call(other)                  # the copying graph, then the recapture there
    other.fill_(3)
    moved, _ = call(other)
    (entry,) = rt["_kw_runner"](model).entries.values()
    assert entry.recaptures == 1 and entry.direct[0].lent
    first_in_pool = {}
    for pool, graph in _Graph.captures:
        first_in_pool.setdefault(id(pool), graph)
    assert first_in_pool[id(entry.direct[0].graph.pool())] is entry.direct[0].graph
    assert all(g.graph.pool() is entry.pool for g in entry.copying)
    assert torch.equal(old, torch.full((5,), 3.0)) and torch.equal(moved, torch.full((5,), 7.0))


def test_a_failed_capture_of_a_second_lent_graph_only_ends_the_lending():
    rt, model, forward, x = _lending_runtime(), _Model(), _forward(), torch.zeros(5)
    call = lambda: rt["_kw_replay"](model, forward, lambda m: (), (x,))   # noqa: E731
    call()
    held = call()
    _Graph.fail = True
    try:
        x.fill_(2)
        y, _ = call()                         # a second lent graph cannot be captured: this call eagerly
    finally:
        _Graph.fail = False
    (entry,) = rt["_kw_runner"](model).entries.values()
    assert entry.lending_failed and rt["_kw_replay_failure"](model) is None
    assert torch.equal(y, torch.full((5,), 5.0)) and torch.equal(held[0], torch.full((5,), 1.0))
    x.fill_(3)
    z, _ = call()                             # a copied-out graph in the key's pool serves it
    assert torch.equal(z, torch.full((5,), 7.0)) and [g.lent for g in entry.direct] == [True, False]
    _Graph.fail = True
    try:
        del z
        call()                                # the lent graph is free again: replayed, no capture
        w = call()                            # held again: the copied-out graph, no capture either
    finally:
        _Graph.fail = False
    assert rt["_kw_replay_failure"](model) is None and torch.equal(w[0], torch.full((5,), 7.0))
