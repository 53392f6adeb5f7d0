"""CUDA-graph replay of a generated forward: the runtime pasted into emitted files (`REPLAY_SOURCE`).

A small network at small batch is bound by the CPU: Python, ATen's dispatch and one launch per kernel cost
more than the GPU work. Replaying a CUDA graph of the whole forward costs one launch. The emitted file uses
it when the compiler measured it faster (`compiler.py`, `_Pipeline.replay`); then `ModelNew.forward` calls
`_kw_replay(self, ModelNew._kw_forward, ModelNew._kw_state, args)`.

The rules, each for a way a graph could give a wrong answer:
- one graph per (stream, train/eval mode, each argument's shape, strides, dtype and device, non-tensor
  arguments by value), and per identity and address of every parameter and buffer the forward reads (a
  replaced parameter, `p.data = t` included, is a new key; writes into a parameter's memory,
  `load_state_dict` and `.data.copy_` included, are read by the replay itself). A graph is replayed only
  while each of those tensors has the identity, address and shape it had at capture (checked every call);
  at most `_KW_GRAPHS_PER_MODEL` graphs are kept per model (the oldest dropped);
- the first call for a key runs the forward eagerly (its result is returned: a train-mode BatchNorm's
  running statistics move once, as in eager; it also warms cuBLAS/cuDNN) and then captures the graph on
  the call's own arguments (capturing runs nothing). A later call whose arguments are at the same
  addresses (a timing loop, or the caching allocator handing out the same block) replays it as is: the
  graph reads whatever is at those addresses, which is the call's arguments. A call with arguments
  elsewhere copies them into static inputs of a second graph, made once; when the next call has its
  arguments at those same new addresses (the caller settled there: a loop after a few calls on other
  tensors), that call runs eagerly and the direct graph is captured again on them, at most
  `_KW_RECAPTURES` times per key (arguments that keep moving keep the copying graph). Copying a 536 MB
  input each call made a 0.46 ms forward cost 0.78 ms under the judge, whose timing inputs are not the
  trials' (level1/36, H100);
- outputs of the direct graphs are *lent*, not copied: returned as aliases (new tensors on the same
  memory), and a graph is replayed again only once no tensor but its own holds its outputs' memory (each
  storage's use count back to what it was right after the capture, at the same address and size: a
  caller's `resize_` of an alias moves it, and that graph is not replayed again). A loop `y = model(x)`
  still holds the last output when it calls again, so up to `_KW_LENT_SETS` direct graphs lend, the
  first free one replayed; a caller holding all of them (keeping every result), or a device without
  twice the first lent graph's pool free, gets a graph whose outputs are copied out after each replay.
  A graph added so is captured and replayed at once (the model is warm; an eager run's intermediates
  would come on top of the pools). Each lent graph is the first graph of its own memory pool: a
  graph captured later into a shared pool may be given an earlier graph's scratch memory for its outputs,
  which that graph's replay overwrites. The copying graph and the copied-out ones share the first direct
  graph's pool, as before. So a key holds at most _KW_LENT_SETS pools of scratch memory (the second only
  once a caller held a result across a call), and one more after the direct graph moved (the first
  pool, kept by the copying graph). Outputs that share memory with anything the graph reads
  (an argument, a static input, a parameter or buffer), or a torch that cannot count a storage's users,
  are always copied out. What a caller must not do with a lent result (as with any memory it frees):
  drop it while work queued on another stream still reads it (`record_stream` is not seen), or keep only
  its storage object (`untyped_storage()`) and no tensor. Copying outputs out every call made a
  train-mode Conv2d + BatchNorm forward of 0.6 ms take 0.17 ms more (its 252 MB output; H100);
- the eager path runs instead whenever a graph cannot be right or cannot be made: gradients wanted (an
  argument requires grad), an argument on the CPU or with overlapping memory (an expanded view), an
  unhashable non-tensor argument, no tensor argument at all, an argument on another device than the
  current one (a graph captures on the current device's streams), a stream already capturing, or a capture
  that failed (then this model never tries again: the reason is kept in `_kw_replay_failure(model)`);
- replay runs under `torch.no_grad()`: the generated kernels have no backward anyway;
- a model's graphs live in a module-level weak dictionary (not on the module: `deepcopy`, `state_dict`
  and `.to()` see nothing of them); graphs are per thread and stream, so no two callers share static
  inputs, and every step is safe under the GIL without a lock.
"""

REPLAY_SOURCE = r'''
_KW_REPLAY = True          # the compiler measured replay faster; set False to run the forward step by step
_KW_GRAPHS_PER_MODEL = 4
_KW_RECAPTURES = 4          # direct graphs captured again per key on arguments that settled elsewhere
_KW_LENT_SETS = 2           # direct graphs per key whose outputs are lent to the caller, not copied
_KW_RUNNERS = None


def _kw_replay(model, forward, state, args):
    """forward(model, *args), replayed from a CUDA graph where one is safe (see the rules in the header)."""
    key = _kw_replay_key(model, args) if _KW_REPLAY else None
    runner = _kw_runner(model) if key is not None else None
    if key is None or runner.failure is not None:
        return forward(model, *args)
    held = state(model)
    identity = tuple((id(t), t.data_ptr(), t.shape) for t in held)
    pointers = tuple(a.data_ptr() for a in args if isinstance(a, torch.Tensor))
    entry = runner.entries.get(key)
    if entry is None or entry.identity != identity:
        with torch.no_grad():
            result = forward(model, *args)
        runner.start(key, identity, held, pointers, forward, model, args)
        return result
    if pointers != entry.pointers and pointers == entry.elsewhere and entry.recaptures < _KW_RECAPTURES:
        # the second call in a row with the arguments at these addresses: the direct graph moves to them
        with torch.no_grad():
            result = forward(model, *args)
        runner.recapture(entry, pointers, forward, model, args)
        return result
    entry.elsewhere = pointers if pointers != entry.pointers else None
    with torch.no_grad():
        if pointers == entry.pointers:          # the arguments live where the graph reads: no copy
            graphs, static_args = entry.direct, args
        else:
            if not entry.copying and not runner.copying(entry, forward, model, args):
                return forward(model, *args)
            for static, value in zip(entry.inputs, args):
                if static is not None:
                    static.copy_(value)
            graphs, static_args = entry.copying, entry.static_args
        lent = [g for g in graphs if g.lent]
        chosen = next((g for g in lent if g.free()), None)
        more = chosen is None and bool(lent) and len(lent) < _KW_LENT_SETS and not entry.lending_failed \
            and _kw_room(lent[0])
        if chosen is None and not more:
            chosen = next((g for g in graphs if not g.lent), None)
        if chosen is None:
            # the caller still holds every set of outputs the direct graphs lent: one graph more (lent while
            # fewer than _KW_LENT_SETS are and memory allows, else copied out), captured and replayed for
            # this call (the model is warm: no eager run, whose intermediates would come on top)
            chosen = runner.add(entry, graphs, forward, model, static_args, more)
            if chosen is None:
                return forward(model, *args)
        chosen.graph.replay()
        if chosen.lent:
            return _kw_map_tensors(chosen.outputs, lambda t: t.detach())
        return _kw_map_tensors(chosen.outputs, lambda t: t.clone(memory_format=torch.preserve_format))


def _kw_replay_key(model, args):
    """The graph key of a call, or None when this call must run eagerly. Graphs are per thread and stream:
    no two callers ever share a graph's static inputs. Every replayed call computes it, so it reads the
    device and stream through torch._C directly (the public wrappers cost 10 us a call more, a tenth of a
    small network's replayed forward)."""
    import _thread

    parts, device = [], None
    for value in args:
        if isinstance(value, torch.Tensor):
            if not value.is_cuda or value.requires_grad or not _kw_dense(value):
                return None
            if device is None:
                device = torch.cuda.current_device()
            if value.get_device() != device:
                return None     # graphs capture on the current device's streams
            parts.append((value.shape, value.stride(), value.dtype))
        elif getattr(type(value), "__hash__", None) is None:
            return None
        else:
            parts.append(("value", type(value), value))
    if device is None or torch.cuda.is_current_stream_capturing():
        return None
    return (_thread.get_ident(), device, _kw_raw_stream(device), model.training, *parts)


def _kw_raw_stream(device):
    """The current stream's handle on `device` (an int)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


def _kw_dense(t):
    """Whether `t` covers its memory exactly, without overlap or gaps (a permutation of a contiguous tensor),
    so that a copy with the same strides exists."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _kw_map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(_kw_map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [_kw_map_tensors(v, fn) for v in value]
    return value


def _kw_runner(model):
    global _KW_RUNNERS
    import weakref

    if _KW_RUNNERS is None:
        _KW_RUNNERS = weakref.WeakKeyDictionary()
    runner = _KW_RUNNERS.get(model)
    if runner is None:
        runner = _KW_RUNNERS.setdefault(model, _KwRunner())
    return runner


def _kw_replay_failure(model):
    """Why replay is off for `model` (a capture failed), or None."""
    return _kw_runner(model).failure


def _kw_uses(t):
    """How many tensors hold `t`'s memory (None where this torch cannot tell)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return None if count is None else count(t.untyped_storage()._cdata)


def _kw_memory(t):
    """(address, bytes) of `t`'s whole storage."""
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def _kw_flat(value):
    """The tensors in `value` (a tensor, or tuples and lists of them), in order."""
    found = []
    _kw_map_tensors(value, found.append)
    return found


class _KwGraph:
    """One captured graph and its static outputs. A `lent` graph's outputs are handed to the caller as
    aliases (new tensors on the same memory) and the graph is replayed again only when the caller holds
    none of them any more: each output's memory is then held by exactly as many tensors as right after
    the capture (`baseline`). A graph that is not lent has its outputs copied out after every replay."""

    def __init__(self, graph, outputs, lent, footprint):
        self.graph, self.outputs = graph, outputs
        self.tensors = _kw_flat(outputs)
        self.baseline = [_kw_uses(t) for t in self.tensors]
        self.memory = [_kw_memory(t) for t in self.tensors]
        self.lent = lent and None not in self.baseline
        self.footprint = footprint      # bytes the capture reserved (a new pool's scratch and outputs)

    def free(self):
        """No tensor but this graph's holds its outputs' memory, still where the graph writes (a caller's
        `resize_` of an alias would have moved it: that graph is never replayed again)."""
        return all(_kw_uses(t) == uses and _kw_memory(t) == at
                   for t, uses, at in zip(self.tensors, self.baseline, self.memory))


def _kw_room(graph):
    """Whether the device has room for another pool the size of `graph`'s, twice over (a lent graph's
    scratch is its own: the judge and other tasks share the GPU)."""
    free, _ = torch.cuda.mem_get_info()
    return free > 2 * graph.footprint


def _kw_lendable(outputs, read):
    """Whether `outputs` lie in the graph's own memory only: none shares memory with a tensor the graph
    reads (an argument, a static input, a parameter or buffer), which its caller or the next call's copy
    may hold or overwrite."""
    spans = [_kw_memory(t) for t in read if isinstance(t, torch.Tensor)]
    for t in _kw_flat(outputs):
        start, size = _kw_memory(t)
        if any(start < s + n and s < start + size for s, n in spans):
            return False
    return True


class _KwEntry:
    """The graphs of one key: `direct` ones read the arguments where the first call had them (replayed
    while the call's arguments are at those addresses: a graph reads whatever is there at replay);
    `copying` ones (made on the first call with arguments elsewhere) read static copies of them. Up to
    _KW_LENT_SETS direct graphs lend their outputs, each the first graph of its own memory pool (a graph
    captured later into a pool may be given an earlier graph's scratch memory for its outputs, which that
    earlier graph's replay overwrites); the graphs whose outputs are copied out right after their replay
    share `pool`, the first direct graph's: they run one after the other on one stream, and nothing of
    theirs outlives a replay."""

    def __init__(self, identity, held, pointers, first):
        self.identity, self.held, self.pointers = identity, held, pointers
        self.direct, self.pool = [first], first.graph.pool()
        self.copying, self.inputs, self.static_args = [], None, None
        self.elsewhere, self.recaptures = None, 0   # the previous call's addresses when not `pointers`
        self.lending_failed = False                 # one more lent graph failed or was not lendable


class _KwRunner:
    def __init__(self):
        self.entries, self.failure = {}, None

    def start(self, key, identity, held, pointers, forward, model, args):
        """Record forward(model, *args), whose tensors are at `pointers`, as the key's direct graph (after an
        eager run of the same call), in a pool of its own."""
        first = self.record(forward, model, args, None, held, lend=True)
        if first is None:
            return
        self.entries[key] = _KwEntry(identity, held, pointers, first)
        while len(self.entries) > _KW_GRAPHS_PER_MODEL:
            self.entries.pop(next(iter(self.entries)), None)

    def recapture(self, entry, pointers, forward, model, args):
        """The key's direct graph recorded again on `args` (at `pointers`), in a new pool (the old graphs are
        dropped; outputs the caller still holds keep their memory)."""
        first = self.record(forward, model, args, None, entry.held, lend=True)
        if first is None:
            return
        entry.direct, entry.pointers, entry.lending_failed = [first], pointers, False
        entry.elsewhere, entry.recaptures = None, entry.recaptures + 1

    def copying(self, entry, forward, model, args):
        """Record the key's copying graph, on static copies of `args`; False when that failed. Its outputs
        are copied out (it shares the key's pool)."""
        inputs = [a.clone(memory_format=torch.preserve_format) if isinstance(a, torch.Tensor) else None
                  for a in args]
        if any(s is not None and s.stride() != a.stride() for s, a in zip(inputs, args)):
            self.failure = "a static input copy did not keep the argument's strides"
            return False
        static_args = [a if s is None else s for s, a in zip(inputs, args)]
        first = self.record(forward, model, static_args, entry.pool, entry.held, lend=False)
        if first is None:
            return False
        entry.inputs, entry.static_args, entry.copying = inputs, static_args, [first]
        return True

    def add(self, entry, graphs, forward, model, args, lend):
        """One more graph of forward(model, *args) for one of the key's paths (`graphs`), or None: lent, in a
        pool of its own (a failed capture then only ends the lending), or copied out, in the key's pool."""
        graph = self.record(forward, model, args, None if lend else entry.pool, entry.held, lend,
                            fatal=not lend)
        if graph is not None:
            graphs.append(graph)
        if lend and (graph is None or not graph.lent):
            entry.lending_failed = True
        return graph

    def record(self, forward, model, args, pool, held, lend, fatal=True):
        """The graph of forward(model, *args) (lent if `lend` and its outputs are its own memory), or None
        after a failed capture, which (if `fatal`) turns replay off for this model (capturing runs nothing:
        the call's result comes from elsewhere)."""
        graph, outputs, caught = torch.cuda.CUDAGraph(), None, _KwCaught()
        # what a capture does first anyway (torch.cuda.graph empties the cache), so that the reserved bytes
        # it adds are the new pool's
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        reserved, stream = torch.cuda.memory_reserved(), torch.cuda.current_stream()
        with caught, torch.no_grad(), torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            outputs = forward(model, *args)
        if torch.cuda.current_stream() != stream:
            torch.cuda.set_stream(stream)   # a capture that failed at its end leaves its stream current
        if caught.failure is not None:
            if fatal:
                self.failure, self.entries = caught.failure, {}
            return None
        return _KwGraph(graph, outputs, lend and _kw_lendable(outputs, [*args, *held]),
                        torch.cuda.memory_reserved() - reserved)


class _KwCaught:
    """Keeps the first line of an Exception raised in its block (a failed capture: it costs the replay,
    never the call, whose result is computed eagerly)."""

    def __init__(self):
        self.failure = None

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if exc is None or not isinstance(exc, Exception):
            return False
        first = (str(exc).strip().splitlines() or [""])[0]
        self.failure = f"{kind.__name__}: {first}".rstrip(": ")
        return True
'''
