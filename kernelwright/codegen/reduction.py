"""The reduction family's renderer: one kernel per group computing its reductions, softmaxes and norms
over each row in passes, with the pointwise prologue inlined into every pass that needs it and the
epilogue fused into the last pass.

`fuse/reduction.py` decided the members, their levels (per element or per row), the passes and the
launch shape; this module only prints them into `cuda/kw_row_kernel.cu.in`. Per pass, the generated code
is: a loop over this thread's chunks of the row (VEC consecutive elements, one 16-byte load per input
where aligned), the elementwise statements, the accumulator updates (once per chunk); then one reduction
of the pass's packed accumulators; then the per-row scalars. The last pass writes the elementwise outputs.
With a row cache, the inputs read by several passes are first copied to shared memory (cp.async) and
every pass reads them from there.
"""

from __future__ import annotations

import re

import torch

from kernelwright.codegen.kernel import KernelSource, cpp_bool, source_template
from kernelwright.codegen.pointwise import op_expression
from kernelwright.codegen.reduction_entry import contiguous_entry
from kernelwright.codegen.reduction_index import (
    decompose,
    domain_strides,
    index_type,
    merge_layout,
    offset,
)
from kernelwright.codegen.reduction_ops import accumulation, param_operands, render_scalars
from kernelwright.fuse.plan import FusedGroup
from kernelwright.fuse.reduction import (
    ELEM_ANCHORS,
    REDUCE_OPS,
    ReductionSpec,
    cached_inputs,
    operand_shape,
    reduction_passes,
)
from kernelwright.ir.graph import Node, format_graph

TEMPLATE = source_template("kw_row_kernel.cu.in")
# Shared memory a block may use when a cluster is not available and the row must fit in one block.
SINGLE_BLOCK_SMEM = 220 * 1024
# With `ReductionSpec.full_unroll`: the most floats a thread's loads of one pass may hold in registers for
# its chunk loops to be unrolled whole (kernels of 1024 threads have 64 registers a thread); half of it for
# 4-byte loads, each with its own register and address: at 32 `ptxas -v` reported spills in 4 of the 120
# unrolled kernels of tests/codegen/reduction_cases.py, at 16 none.
FULL_UNROLL_FLOATS = 32


def render(group: FusedGroup) -> KernelSource:
    return _RowKernel(group, group.config[0]).source()


class _RowKernel:
    def __init__(self, group: FusedGroup, spec: ReductionSpec):
        self.group, self.spec = group, spec
        space = spec.space
        self.level = {id(n): lv for n, lv in zip(group.nodes, spec.levels, strict=True)}
        self.index = {id(n): i for i, n in enumerate(group.nodes)}
        self.input_pos = {id(n): k for k, n in enumerate(group.inputs)}
        self.pass_of = reduction_passes(group)
        self.reduction_passes = max(self.pass_of.values()) + 1
        self.elem_outputs = [o for o in group.outputs if self.level[id(o)] == "elem"]
        self.row_outputs = [o for o in group.outputs if self.level[id(o)] != "elem"]
        self.name = "kw_reduce_" + _digest(group)
        # accesses: (input position or -1 for the output, view shape, context) -> strides over the domain
        self.access_keys: list[tuple[int, tuple[int, ...], str]] = []
        self.frozen = False
        for node in group.nodes:
            for k, inp in enumerate(node.inputs):
                if id(inp) in self.input_pos:
                    self._access(self.input_pos[id(inp)], operand_shape(node, k), self._context(node))
        if self.elem_outputs:
            self._access(-1, space.shape, "elem")
        ir_all = tuple(range(len(space.shape)))
        ir_kept = tuple(d for d in ir_all if d not in space.ir_reduced)
        strides = []
        for _, view, context in self.access_keys:
            dims = ir_kept if context == "rowsq" else ir_all
            ctx_shape = tuple(space.shape[d] for d in dims)
            strides.append(domain_strides(view, ctx_shape, dims, space.split, space.domain))
        self.layout = merge_layout(space.domain, space.reduce, strides)
        vec_ok = all(self.layout.innermost_stride(a) in (0, 1) for a in range(len(strides)))
        self.vec = spec.vec if vec_ok else 1
        # rows not a multiple of 4 long: 16-byte chunks from each row's first aligned element (`_anchor`)
        self.anchor = None
        reduced = self.layout.reduced_dims
        if self.vec == 4 and reduced and self.layout.sizes[reduced[-1]] % 4:
            self.anchor = self._anchor(spec)
            if self.anchor is None:
                self.vec = 1
        self.frozen = True      # every access is known: the layout above covers them all
        self.readers = {k: self._passes_reading(k) for k in range(len(group.inputs))}
        # one cache slot per input: an input addressed two ways (two views) is not cached
        self.cached = [k for k in cached_inputs(group, space) if len(self.readers[k]) > 1
                       and sum(key[0] == k for key in self.access_keys) == 1] if spec.cache else []
        self.shares = self._shared_accumulators()
        # persistent: clusters walk their rows, the final pass refilling the cache with the next row's chunks
        # (not SHIFTED: the next row's chunks start elsewhere than this row's)
        self.persistent = bool(spec.persistent and self.cached and spec.layout == "row" and not spec.split
                               and spec.cluster > 1 and self.anchor is None)
        self.final_pass = self.reduction_passes if self.elem_outputs else self.reduction_passes - 1
        # one launch: split rows whose blocks wait for each other's partials (row layout, elementwise outputs)
        self.one_launch = bool(spec.one_launch and spec.split and self.elem_outputs and spec.layout == "row")
        extents = [space.rows * space.row_length] + [i.numel for i in group.inputs]
        self.idx_t = index_type(*extents)

    # ------------------------------------------------------------------ accesses and levels

    def _anchor(self, spec: ReductionSpec) -> int | None:
        """For rows whose length is not a multiple of 4: the access whose address decides where each row's
        16-byte chunks start (`SHIFTED` kernels), or None when the row cannot be taken that way. It needs
        the row layout with one reduced (merged) dim, innermost; every access that walks the row must do so
        from the same row offset as the anchor (the same kept strides: the same alignment, given pointers
        at the same phase, which the launcher checks), except inputs the same for every row (an affine
        weight), which are read a value at a time."""
        layout = self.layout
        if spec.layout != "row" or layout.reduced_dims != [len(layout.sizes) - 1]:
            return None
        walking = [a for a in range(len(layout.accesses)) if layout.innermost_stride(a) == 1]
        row_varying = [a for a in walking if any(layout.accesses[a][d] for d in layout.kept_dims)]
        if not row_varying:
            return None
        anchor = row_varying[0]
        kept = [layout.accesses[anchor][d] for d in layout.kept_dims]
        for a in row_varying:
            if [layout.accesses[a][d] for d in layout.kept_dims] != kept:
                return None
        return anchor

    def _gathered(self, a: int) -> bool:
        """Whether access `a` walks the row but is the same for every row (an affine weight): in a SHIFTED
        kernel its chunks are not aligned, so it is read a value at a time."""
        layout = self.layout
        return (self.anchor is not None and layout.innermost_stride(a) == 1
                and not any(layout.accesses[a][d] for d in layout.kept_dims))

    def _context(self, node: Node) -> str:
        if node.op in REDUCE_OPS or node.op in ELEM_ANCHORS:
            return "elem"
        return self.level[id(node)]

    def _access(self, position: int, view: tuple[int, ...], context: str) -> int:
        key = (position, tuple(view), context)
        if key not in self.access_keys:
            assert not self.frozen, f"access {key} was not registered before the layout was merged"
            self.access_keys.append(key)
        return self.access_keys.index(key)

    def _passes_reading(self, position: int) -> set[int]:
        """The passes whose elementwise statements read input `position`."""
        found = set()
        for p in range(self.reduction_passes + 1):
            env = _PassEnv(self, p)
            for root in self._pass_roots(p):
                env.elem(root)
            if any(self.access_keys[a][0] == position for a in env.loads):
                found.add(p)
        return found

    def _shared_accumulators(self) -> dict[int, tuple[int, str | None]]:
        """Members whose accumulator another member of the same pass already keeps: node id -> (that
        member's index, the result read from it, or None for the member's own). The same accumulator over
        the same values (a training BatchNorm and the unbiased variance of its running-stat update), or a
        mean over values a Welford accumulator reads (its running mean): one update per element, not three."""
        shares: dict[int, tuple[int, str | None]] = {}
        length = self.spec.space.row_length
        outputs = set(map(id, self.group.outputs))
        for p in range(self.reduction_passes):
            env = _PassEnv(self, p)
            members = [n for n in self.group.nodes if self.pass_of.get(id(n)) == p]
            # Welford accumulators first and means last, so that a mean finds a sum or a Welford whichever
            # comes first in the group
            members.sort(key=lambda n: (accumulation(n, length).acc != "kw::WelfordAcc", n.op == "mean"))
            owners: dict[tuple[str, str], int] = {}
            for node in members:
                acc, values = accumulation(node, length).acc, env.elem(node.inputs[0])
                if (acc, values) in owners:
                    shares[id(node)] = (owners[acc, values], None)
                elif node.op == "mean" and ("kw::WelfordAcc", values) in owners and id(node) not in outputs:
                    # the Welford running mean (an inf in the row makes it NaN, as ATen's BatchNorm
                    # statistics; torch.mean gives inf): only for a mean used inside the group
                    shares[id(node)] = (owners["kw::WelfordAcc", values], "{a}.mean")
                else:
                    owners[acc, values] = self.index[id(node)]
        return shares

    def _accumulating(self, p: int) -> list[Node]:
        """The members of pass `p` that keep an accumulator of their own (not shared with another)."""
        return [n for n in self.group.nodes if self.pass_of.get(id(n)) == p and id(n) not in self.shares]

    def _pass_roots(self, p: int) -> list[Node]:
        if p < self.reduction_passes:
            return [n.inputs[0] for n in self.group.nodes if self.pass_of.get(id(n)) == p]
        return list(self.elem_outputs)

    # ------------------------------------------------------------------ code

    def source(self) -> KernelSource:
        spec, space = self.spec, self.spec.space
        column = spec.layout == "column"
        row_threads = 32 * spec.warps_per_row if spec.lanes >= 32 else spec.lanes
        rows_per_block = 32 if column else spec.threads // row_threads
        params = self._params()
        structs = [self._struct(p) for p in range(self.reduction_passes)]
        body = self._split_body(column) if spec.split else self._body(column)
        cuda = TEMPLATE.substitute(
            name=self.name,
            summary=", ".join(n.op for n in self.group.nodes),
            row_owner="lane l of a 32-row tile, the warps splitting the row" if column
            else f"{spec.lanes} lanes of a warp" if spec.lanes < 32 else f"{spec.warps_per_row} warp(s)",
            idx_t=self.idx_t, rows=space.rows, length=space.row_length, threads=spec.threads,
            warps=spec.warps_per_row, row_threads=row_threads, rows_per_block=rows_per_block,
            cached=max(1, len(self.cached)),
            structs="\n\n".join(structs), params=", ".join(params),
            persistent=cpp_bool(self.persistent),
            block_order=self._rows_open(), rows_close=self._rows_close(),
            mapping=self._mapping(column), row_offsets="\n".join(self._row_offsets()),
            body="\n".join(body), vec=self.vec, shifted=cpp_bool(self.anchor is not None),
            **self._launcher(params, rows_per_block),
        )
        entry, kernel_spec = contiguous_entry(self.name, self.group.inputs, self.group.outputs,
                                       workspace=self.spec.split)
        return KernelSource(self.name, cuda + entry, kernel_spec, _ir_comment(self.group))

    def _body(self, column: bool) -> list[str]:
        body, row_lines = [], _RowScalars(self)
        for p in range(self.reduction_passes):
            body += self._reduction_pass(p, column)
            body += row_lines.after_pass(p)
        if self.elem_outputs:
            body += self._output_pass()
        return body + self._row_writes(row_lines)

    def _row_writes(self, row_lines: _RowScalars) -> list[str]:
        if not self.row_outputs:
            return []
        writes = [f"    out{self._out_pos(o)}[row] = {row_lines.value(o)};" for o in self.row_outputs]
        return ["  if (live && leader) {", *writes, "  }"]

    def _split_body(self, column: bool) -> list[str]:
        """Split rows (one reduction pass): phase 0 accumulates each block's share of the row, and the
        last block of the row to arrive combines the partials, writes the row outputs and keeps the
        combined accumulator; with elementwise outputs, phase 1 (the next launch) reads it back in every
        block and writes that block's share of the outputs."""
        assert self.reduction_passes == 1, "split rows have one reduction pass"
        if self.one_launch:
            return self._one_launch_body()
        stats = _RowScalars(self)
        phase0 = (self._reduction_pass(0, column) + [_maybe_unused(line) for line in stats.after_pass(0)]
                  + self._row_writes(stats))
        if not self.elem_outputs:
            return phase0
        apply = _RowScalars(self)
        return (["  if (phase == 0) {"] + phase0
                + ["    if (live && leader) combined[row] = acc0;", "    return;", "  }",
                   "  // ---- phase 1: every block reads the row's combined statistics, then its share",
                   "  const Pass0 acc0 = live ? kw::load_cg(&combined[row]) : Pass0::init();"]
                + [_maybe_unused(line) for line in apply.after_pass(0)] + self._output_pass())

    def _rows_open(self) -> str:
        """Which rows a block takes: a loop over them (persistent or one-launch kernels), else
        `_block_order`'s one share of one row per block."""
        if self.persistent:
            return _PERSISTENT_ROWS
        return _ONE_LAUNCH_ROWS if self.one_launch else _block_order(self.spec.split)

    def _rows_close(self) -> str:
        """The end of the loop over rows that `_rows_open` opened (persistent or one-launch kernels)."""
        if self.persistent:
            return "  prefetched = next_live;\n  }"
        return "  }" if self.one_launch else ""

    def _one_launch_body(self) -> list[str]:
        """Split rows in one launch (phase 2; the body also runs phases 0 and 1 of the two-launch fallback):
        each block accumulates its share, stores its partial and arrives; in phase 2 it then waits for the
        row's other blocks and combines every partial itself (in rank order, as the last block of phase 0
        does: all blocks get the same statistics), writes the row outputs (rank 0) and its share of the
        elementwise outputs."""
        stats, apply = _RowScalars(self), _RowScalars(self)
        phase0 = [_maybe_unused(line) for line in stats.after_pass(0)] + self._row_writes(stats)
        return (["  Pass0 stats = Pass0::init();",
                 "  if (phase != 1) {",
                 *("  " + line for line in self._reduction_pass(0, column=False)),
                 "    if (phase == 0) {   // the two-launch fallback: the last block to arrive is here",
                 *("  " + line for line in phase0),
                 "      if (live && leader) combined[row] = acc0;",
                 "      continue;",
                 "    }",
                 "    stats = acc0;",
                 "  } else {",
                 "    stats = live ? kw::load_cg(&combined[row]) : Pass0::init();",
                 "  }",
                 "  const Pass0 acc0 = stats;"]
                + [_maybe_unused(line) for line in apply.after_pass(0)]
                + (["  if (phase == 2 && live && leader && rank == 0) {",
                    *(f"    out{self._out_pos(o)}[row] = {apply.value(o)};" for o in self.row_outputs),
                    "  }"] if self.row_outputs else [])
                + self._output_pass())

    def _params(self) -> list[str]:
        ins = [f"const float* __restrict__ in{k}" for k in range(len(self.group.inputs))]
        outs = [f"{'long long' if o.dtype == torch.int64 else 'float'}* __restrict__ out{k}"
                for k, o in enumerate(self.group.outputs)]
        # split rows: each block's partial, each row's combined accumulator, per row (column tile) how many
        # blocks have stored theirs (this launch's workspace; written and read by different blocks, so not
        # __restrict__), and the phase (0: statistics, 1: elementwise outputs)
        split = ["Pass0* partials", "Pass0* combined", "unsigned* arrivals", "int phase"] \
            if self.spec.split else []
        return ins + outs + split

    def _out_pos(self, node: Node) -> int:
        return next(k for k, o in enumerate(self.group.outputs) if o is node)

    def _mapping(self, column: bool) -> str:
        if column:
            lines = ["  const int slot = threadIdx.x & 31;            // the kept position this lane owns",
                     "  const int t = threadIdx.x >> 5;",
                     "  const idx_t row = block_row * 32 + slot;",
                     "  constexpr int STEP = WARPS;"]
        else:
            lines = ["  const int slot = threadIdx.x / ROW_THREADS;    // the row within the block",
                     "  const int t = threadIdx.x % ROW_THREADS;",
                     "  const idx_t row = block_row * ROWS_PER_BLOCK + slot;",
                     "  constexpr int STEP = ROW_THREADS;"]
        # split rows: only the block that combines the partials gets past the reduction
        leader = "t == 0" if self.spec.split else "t == 0 && rank == 0"
        return "\n".join(lines + [f"  const bool leader = {leader};", "  (void)leader;"])

    def _row_offsets(self) -> list[str]:
        layout = self.layout
        lines = ["  // kept coordinates of this row, and each tensor's offset to the row's start"]
        lines += ["  " + s for s in decompose("krow", layout.kept_dims, layout.sizes, "kd", "idx_t")]
        for a, strides in enumerate(layout.accesses):
            lines.append(f"  const idx_t kb{a} = {offset(layout.kept_dims, strides, 'kd')};")
            lines.append(f"  (void)kb{a};")
        if self.anchor is not None:
            pointer = self._pointer(self.anchor)
            start = f"reinterpret_cast<uintptr_t>({pointer} + kb{self.anchor}) / 4"
            lines += ["  // this row's 16-byte chunks start `shift` elements in (SHIFTED); `edges` elements",
                      "  // before and after them are taken one at a time",
                      "  const int shift = SHIFTED && VEC > 1 ? "
                      f"static_cast<int>((VEC - {start} % VEC) % VEC) : 0;",
                      "  const idx_t ROW_CHUNKS = SHIFTED && VEC > 1 ? (LEN - shift) / VEC : CHUNKS;",
                      "  const int edges = static_cast<int>(LEN - ROW_CHUNKS * VEC);",
                      "  (void)edges;"]
        else:
            lines.append("  constexpr idx_t ROW_CHUNKS = CHUNKS;")
        if self.persistent:
            lines += ["  // the next row this block takes (the final pass prefetches its cached inputs)",
                      "  const idx_t nrow = (block_row + row_step) * ROWS_PER_BLOCK + slot;",
                      "  const bool next_live = PERSIST && nrow < ROWS;",
                      "  const idx_t nkrow = next_live ? nrow : 0;",
                      "  (void)nkrow;"]
            lines += ["  " + s for s in decompose("nkrow", layout.kept_dims, layout.sizes, "nkd", "idx_t")]
            for a in self._fills():
                lines.append(f"  const idx_t nkb{a} = {offset(layout.kept_dims, layout.accesses[a], 'nkd')};")
        return lines

    def _struct(self, p: int) -> str:
        members = self._accumulating(p)
        name = f"Pass{p}"
        fields = [(f"a{self.index[id(n)]}", accumulation(n, self.spec.space.row_length).acc) for n in members]
        decl = "\n".join(f"  {acc} {f};" for f, acc in fields)
        init = ", ".join(f"{acc}::init()" for _, acc in fields)
        combine = " ".join(f"{f}.combine(o.{f});" for f, _ in fields)
        shuffle = ", ".join(f"{f}.shfl_xor(m)" for f, _ in fields)
        return (f"// pass {p}: {', '.join(n.op for n in members)}\nstruct {name} {{\n{decl}\n"
                f"  __device__ static {name} init() {{ return {{{init}}}; }}\n"
                f"  __device__ void combine(const {name}& o) {{ {combine} }}\n"
                f"  __device__ {name} shfl_xor(int m) const {{ return {{{shuffle}}}; }}\n}};")

    def _loop(self, env: _PassEnv, inner: list[str], after: list[str], decls: list[str] = ()) -> list[str]:
        """The chunk loop of one pass: coordinates, loads (from global or the row cache), `decls`, the
        per-element statements and `inner`, then `after` once per chunk."""
        layout = self.layout
        head = [f"const idx_t p0 = {self._chunk_start()};   // first element of this chunk, along the row",
                "(void)p0;"]
        wait = []
        if env.p == 0 and self._fill_overlaps_pass0():
            wait.append("if (CACHE) kw::copy_async_wait_pending(--fill_pending);  // chunk c landed")
        prefetch = self.persistent and env.p == self.final_pass
        coords = decompose("p0", layout.reduced_dims, layout.sizes, "rd", "idx_t") \
            if env.loads or env.stores or prefetch else []
        rest = list(decls) + ["#pragma unroll", "for (int j = 0; j < VEC; ++j) {"]
        rest += ["  " + s for s in env.lines + inner]
        rest += ["}"] + list(after)
        if prefetch:
            # every read of this chunk's cache slots is done (loaded above): refill them with the next row's
            rest += ["if (next_live) {   // the next row's chunk c, into the slots just read",
                     *(f"  kw::copy_async<VEC>({self._cache_slot(a)}, {self._address(a, 'nkb')});"
                       for a in self._fills()),
                     "  kw::copy_async_commit();", "  ++fill_pending;", "}"]
        loads = [(f"x{a}", self._load_value(a)) for a in env.loads]
        edge_body = list(decls) + rest[len(decls):rest.index("}") + 1] + list(after)   # no prefetch
        chunks = self._chunk_loop(head, wait, coords, loads, rest)
        return ["  if (live) {", *chunks, *self._edges(env, edge_body), "  }"]

    def _chunk_start(self) -> str:
        """The row element where chunk `c` starts (SHIFTED: counted from the row's first aligned one)."""
        return "shift + c * VEC" if self.anchor is not None else "c * VEC"

    def _edges(self, env: _PassEnv, body: list[str]) -> list[str]:
        """SHIFTED: the row's elements outside its aligned chunks (at most 3 before, 3 after), one each for
        the first threads of the row's first block, with the pass's statements at width 1 (`body`: the
        chunk's statements and updates without the prefetch); read from global memory, never the cache."""
        if self.anchor is None:
            return []
        layout = self.layout
        coords = decompose("p0", layout.reduced_dims, layout.sizes, "rd", "idx_t") \
            if env.loads or env.stores else []
        loads = [f"const kw::Vec<float, 1> x{a} = kw::load_vec<float, 1>({self._address(a)});"
                 for a in env.loads]
        # an edge element may come before the chunks' (the row's head): the general arg update
        lines = ["const idx_t p0 = t < shift ? t : ROW_CHUNKS * VEC + t;   // an edge element of the row",
                 "(void)p0;", *coords, *loads,
                 *(re.sub(r"\bVEC\b", "1", line).replace(".update_next(", ".update(") for line in body)]
        edge = ["    if (SHIFTED && VEC > 1 && rank == 0 && t < edges) {"]
        return edge + ["      " + line for line in lines] + ["    }"]

    def _chunk_loop(self, head: list[str], wait: list[str], coords: list[str], loads: list[tuple[str, str]],
                    rest: list[str]) -> list[str]:
        """For each chunk `c` this thread takes: `head`, `wait`, `coords` (the chunk's coordinates), the
        `loads` (name, value), `rest`; indented inside `if (live)`. A runtime loop unrolled by `spec.unroll`
        (4 unless measured otherwise), so that several independent loads per thread are in flight (the
        accumulator chain is serial, the loads are not). With `spec.full_unroll` (row layout), when a
        thread's share of loaded values fits FULL_UNROLL_FLOATS registers: two loops over the compile-time
        trip count, the first issuing every load of the share (each chunk predicated), the second computing;
        the runtime loop's remainder (a thread taking fewer chunks than the unroll, e.g. 2.5 on average) has
        one load in flight at a time."""
        vec = "kw::Vec<float, VEC>"
        body = head + wait + coords + [f"const {vec} {name} = {value};" for name, value in loads] + rest
        loop = "for (idx_t c = c_begin + t; c < c_end; c += STEP) {"
        runtime = [f"#pragma unroll {self.spec.unroll}", loop, *("  " + line for line in body), "}"]
        if not (self.spec.full_unroll and self.spec.layout == "row"):
            return ["    " + line for line in runtime]

        def each_chunk(lines: list[str], note: str = "") -> list[str]:
            return ["#pragma unroll", f"for (int k = 0; k < TRIPS; ++k) {{{note}",
                    "  const idx_t c = c_begin + t + static_cast<idx_t>(k) * STEP;",
                    "  if (c < c_end) {", *("    " + line for line in lines), "  }", "}"]

        if loads:
            issue = [f"{name}_k[k] = {value};" for name, value in loads]
            take = [f"const {vec} {name} = {name}_k[k];" for name, _ in loads]
            unrolled = ([f"{vec} {name}_k[TRIPS];" for name, _ in loads]
                        + each_chunk(head + wait + coords + issue, "   // every load of the share in flight")
                        + each_chunk(head + coords + take + rest))
        else:
            unrolled = each_chunk(head + wait + coords + rest)
        limit = f"(VEC == 1 ? {FULL_UNROLL_FLOATS // 2} : {FULL_UNROLL_FLOATS})"
        lines = ["constexpr idx_t TRIPS = (PER_BLOCK + STEP - 1) / STEP;   // the most chunks a thread takes",
                 f"if constexpr (TRIPS * {max(len(loads), 1)} * VEC <= {limit}) {{",
                 *("  " + line for line in unrolled), "} else {", *("  " + line for line in runtime), "}"]
        return ["    " + line for line in lines]

    def _cache_slot(self, a: int) -> str:
        slot = self.cached.index(self.access_keys[a][0])
        return f"cache + ({slot} * PER_BLOCK + (c - c_begin)) * VEC"

    def _address(self, a: int, row_offset: str = "kb") -> str:
        along = offset(self.layout.reduced_dims, self.layout.accesses[a], "rd")
        return f"{self._pointer(a)} + {row_offset}{a} + {along}"

    def _pointer(self, a: int) -> str:
        """The base pointer of access `a` (an input, or the elementwise outputs' first)."""
        position = self.access_keys[a][0]
        if position >= 0:
            return f"in{position}"
        return f"out{self._out_pos(self.elem_outputs[0])}"

    def _fills(self) -> list[int]:
        """The accesses the row cache holds (one per cached input)."""
        return [a for a, (position, _, _) in enumerate(self.access_keys) if position in self.cached]

    def _load_value(self, a: int) -> str:
        """The expression loading access `a`'s chunk (from the row cache when the input is cached)."""
        vec = "kw::Vec<float, VEC>"
        if self.layout.innermost_stride(a) == 0 and self.layout.reduced and self.layout.reduced[-1]:
            load = f"kw::splat<float, VEC>(kw::load({self._address(a)}))"
        elif self._gathered(a):
            load = f"kw::load_each<float, VEC>({self._address(a)})"
        else:
            load = f"kw::load_vec<float, VEC>({self._address(a)})"
        if self.access_keys[a][0] not in self.cached:
            return load
        return f"CACHE ? *reinterpret_cast<const {vec}*>({self._cache_slot(a)}) : {load}"

    def _fill_overlaps_pass0(self) -> bool:
        """Whether pass 0 reads the row cache, and so waits for each chunk's copy as it reaches it."""
        return any(0 in self.readers[position] for position in self.cached)

    def _cache_fill(self) -> list[str]:
        """With CACHE, before the first pass: every chunk of the cached inputs that this thread will read,
        copied to the row cache asynchronously, one cp.async group per chunk; pass 0 waits for each
        chunk's group just before using it, so its work overlaps the copies still in flight. Each thread
        reads back only what it copied itself."""
        layout = self.layout
        overlap = self._fill_overlaps_pass0()
        lines = ["  // row cache fill: this thread's whole share of the row in flight at once (cp.async),",
                 "  // then every pass reads it from shared memory; HBM sees one read of the row"]
        if self.persistent:
            lines.append("  if (CACHE && live && !prefetched) {   // else the last row prefetched it")
        else:
            lines += ["  int fill_pending = 0;   // cp.async groups this thread committed, one per chunk",
                      "  (void)fill_pending;",
                      "  if (CACHE && live) {"]
        coords = decompose("p0", layout.reduced_dims, layout.sizes, "rd", "idx_t")
        copies = [f"kw::copy_async<VEC>({self._cache_slot(a)}, {self._address(a)});" for a in self._fills()]
        lines += self._chunk_loop([f"const idx_t p0 = {self._chunk_start()};"], [], coords, [],
                                  copies + ["kw::copy_async_commit();", "++fill_pending;"])
        if self.persistent:
            lines.append("  }")
            if not overlap:
                lines.append("  if (CACHE && live) kw::copy_async_wait_all();")
            return lines
        if not overlap:
            lines.append("    kw::copy_async_wait_all();")
        lines.append("  }")
        return lines

    def _reduction_pass(self, p: int, column: bool) -> list[str]:
        env = _PassEnv(self, p)
        inner, after, decls = [], [], []
        for node in self._accumulating(p):
            x = env.elem(node.inputs[0])
            i = self.index[id(node)]
            field = f"acc{p}.a{i}"
            if accumulation(node, self.spec.space.row_length).indexed:
                # a thread takes its chunks in row order: each index past those it has (`_edges` takes
                # the row's edges with the general update)
                inner.append(f"{field}.update_next({x}, p0 + j);")
            else:
                # the chunk's values, folded in together after the element loop
                decls.append(f"float u{i}[VEC];")
                inner.append(f"u{i}[j] = {x};")
                after.append(f"{field}.update_vec<VEC>(u{i});")
        reduce, scratch = _reducer(column)
        slots = "32" if column else "ROWS_PER_BLOCK"
        lines = [f"  // ---- pass {p}"]
        if p == 0 and self.cached:
            lines += self._cache_fill()
        lines += [f"  Pass{p} acc{p} = Pass{p}::init();"]
        lines += self._loop(env, inner, after, decls)
        lines += ["  {",
                  f"    __shared__ Pass{p} scratch[{scratch}];",
                  f"    acc{p} = kw::{reduce}(acc{p}, scratch);",
                  "  }"]
        if self.spec.split:
            return lines + self._split_combine(p, column)
        return lines + ["  if constexpr (CL > 1) {",
                        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900",
                        f"    __shared__ Pass{p} slots[{slots}];",
                        f"    if (t == 0) slots[slot] = acc{p};",
                        f"    kw::cluster_combine<{slots}>(slots);",
                        f"    acc{p} = slots[slot];",
                        "#else",
                        "    __trap();  // clusters need sm_90; the launcher starts it nowhere else",
                        "#endif",
                        "  }"]

    def _split_combine(self, p: int, column: bool) -> list[str]:
        """Split rows: each block stores its partial (one per row, or per lane of a column tile), and the
        last of the row's blocks to arrive (a counter per row or tile, zeroed by the launcher) combines
        all of them in rank order (the result does not depend on which block is last); the others are
        done."""
        reduce, scratch = _reducer(column)
        if self.one_launch:
            # phase 2: every block waits for the row's partials (a cooperative launch: all blocks resident)
            arrive = ["    if (threadIdx.x == 0) {",
                      "      last = atomicAdd(&arrivals[block_row], 1u) == CL - 1;",
                      "      if (phase == 2) kw::wait_count(&arrivals[block_row], CL);",
                      "    }",
                      "    __syncthreads();",
                      "    if (phase == 0 && !last) continue;"]
        else:
            arrive = ["    if (threadIdx.x == 0) last = atomicAdd(&arrivals[block_row], 1u) == CL - 1;",
                      "    __syncthreads();",
                      "    if (!last) return;"]
        return ["  {",
                "    __shared__ bool last;",
                f"    if (t == 0 && live) partials[row * CL + rank] = acc{p};",
                "    __threadfence();",
                "    __syncthreads();",
                *arrive,
                "    __threadfence();",
                f"    Pass{p} mine = Pass{p}::init();",
                "    for (int i = t; live && i < CL; i += STEP)",
                "      mine.combine(kw::load_cg(&partials[row * CL + i]));",
                f"    __shared__ Pass{p} combine_scratch[{scratch}];",
                f"    acc{p} = kw::{reduce}(mine, combine_scratch);",
                "  }"]

    def _output_pass(self) -> list[str]:
        p = self.reduction_passes
        env = _PassEnv(self, p)
        inner, stores = [], []
        for node in self.elem_outputs:
            k = self._out_pos(node)
            value = env.elem(node)
            inner.append(f"y{k}.v[j] = {value};")
            along = offset(self.layout.reduced_dims, self.layout.accesses[env.out_access], "rd")
            stores.append(f"kw::store_vec<float, VEC>(out{k} + kb{env.out_access} + {along}, y{k});")
        env.stores = [env.out_access]
        decls = [f"kw::Vec<float, VEC> y{self._out_pos(n)};" for n in self.elem_outputs]
        return ["  // ---- output pass"] + self._loop(env, inner, stores, decls)

    def _launcher(self, params: list[str], rows_per_block: int) -> dict[str, str]:
        spec = self.spec
        args = ", ".join(p.rsplit(" ", 1)[1] for p in params)
        pointers = [f"in{k}" for k in range(len(self.group.inputs))] + \
            [f"out{k}" for k in range(len(self.group.outputs))]
        aligned = " && ".join(f"kw::is_aligned<float4>({p})" for p in pointers) or "true"
        if self.anchor is not None:
            # SHIFTED: the pointers that walk the rows at the same phase as the anchor's (then every row's
            # chunks align for all of them); the others are read a value at a time
            anchor = self._pointer(self.anchor)
            walking = {self._pointer(a) for a in range(len(self.layout.accesses))
                       if self.layout.innermost_stride(a) == 1 and not self._gathered(a)}
            walking |= {f"out{self._out_pos(n)}" for n in self.elem_outputs}
            aligned = " && ".join(f"kw::same_phase16({p}, {anchor})" for p in sorted(walking - {anchor})) \
                or "true"
        full_row = rows_per_block * max(1, len(self.cached)) * spec.space.row_length * 4
        entry_params = params[:-4] if spec.split else params      # the split's four are the launcher's
        fields = dict(name=self.name, params=", ".join(params), entry_params=", ".join(entry_params),
                      one_launch=cpp_bool(self.one_launch),
                      args=args, cluster=spec.cluster,
                      cache=cpp_bool(self.cached),
                      split=cpp_bool(spec.split),
                      fallback_cache=cpp_bool(self.cached and full_row <= SINGLE_BLOCK_SMEM),
                      portable=min(spec.cluster, 8), phases=2 if self.elem_outputs else 1,
                      retry=cpp_bool(spec.cluster > 8 or self.cached),
                      vec_pick=f"({aligned})" if self.vec == 4 else "false")
        entry = _SPLIT_ENTRY if spec.split else _ENTRY
        return {"launch": _LAUNCH.substitute(fields), "entry": entry.substitute(fields)}


class _PassEnv:
    """The elementwise statements of one pass: each member evaluated once per element, in dependency
    order; outside tensors become loads (`loads`, access ids), row values their scalar names."""

    def __init__(self, kernel: _RowKernel, p: int):
        self.k, self.p = kernel, p
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.loads: list[int] = []
        self.stores: list[int] = []
        self.out_access = kernel.access_keys.index((-1, kernel.spec.space.shape, "elem")) \
            if kernel.elem_outputs else -1

    def operand(self, consumer: Node, k: int) -> str | None:
        inp = consumer.inputs[k]
        if inp.op == "const":
            return None
        if id(inp) in self.k.input_pos:
            a = self.k._access(self.k.input_pos[id(inp)], operand_shape(consumer, k), "elem")
            if a not in self.loads:
                self.loads.append(a)
            return f"x{a}.v[j]"
        return self.elem(inp)

    def elem(self, node: Node) -> str:
        if id(node) in self.k.input_pos:
            # a reduction reading an outside tensor directly
            a = self.k._access(self.k.input_pos[id(node)], node.shape, "elem")
            if a not in self.loads:
                self.loads.append(a)
            return f"x{a}.v[j]"
        if self.k.level[id(node)] != "elem":
            return _RowScalars.name(self.k, node)
        if id(node) in self.names:
            return self.names[id(node)]
        i = self.k.index[id(node)]
        if node.op in ELEM_ANCHORS:
            entry = accumulation(node, self.k.spec.space.row_length)
            params = {name: self.operand(node, pos) for name, pos in param_operands(node).items()}
            scalars = {f"s{j}": f"r{i}_{j}" for j in range(len(entry.scalars))}
            expr = entry.elem.format(x=self.operand(node, 0), **params, **scalars)
        else:
            expr = op_expression(node, [self.operand(node, k) for k in range(len(node.inputs))])
        self.lines.append(f"const {'bool' if node.dtype == torch.bool else 'float'} e{i} = {expr};")
        self.names[id(node)] = f"e{i}"
        return f"e{i}"


class _RowScalars:
    """Per-row values: each reduction's results right after its pass, then every row-level pointwise
    member as soon as its inputs are known."""

    def __init__(self, kernel: _RowKernel):
        self.k = kernel
        self.done: set[int] = set()

    @staticmethod
    def name(kernel: _RowKernel, node: Node) -> str:
        return f"r{kernel.index[id(node)]}"

    def value(self, node: Node) -> str:
        return self.name(self.k, node)

    def after_pass(self, p: int) -> list[str]:
        lines = []
        length = self.k.spec.space.row_length
        for node in self.k.group.nodes:
            if self.k.pass_of.get(id(node)) != p:
                continue
            i = self.k.index[id(node)]
            entry = accumulation(node, length)
            owner, result = self.k.shares.get(id(node), (i, None))
            values = render_scalars(entry, f"acc{p}.a{owner}", length) if result is None \
                else [result.format(a=f"acc{p}.a{owner}")]
            ctype = "long long" if node.dtype == torch.int64 else "float"
            if entry.elem is None:
                lines.append(f"  const {ctype} r{i} = {values[0]};")
            else:
                lines += [f"  const float r{i}_{j} = {v};" for j, v in enumerate(values)]
            self.done.add(id(node))
        progress = True
        while progress:
            progress = False
            for node in self.k.group.nodes:
                if id(node) in self.done or self.k.level[id(node)] == "elem" or id(node) in self.k.pass_of:
                    continue
                members = [i for i in node.inputs if id(i) in self.k.level]
                if not all(id(m) in self.done for m in members):
                    continue
                operands = []
                for k, inp in enumerate(node.inputs):
                    if inp.op == "const":
                        operands.append(None)
                    elif id(inp) in self.k.input_pos:
                        position = self.k.input_pos[id(inp)]
                        a = self.k._access(position, operand_shape(node, k), self.k.level[id(node)])
                        operands.append(f"kw::load(in{position} + kb{a})")
                    else:
                        operands.append(self.name(self.k, inp))
                i = self.k.index[id(node)]
                lines.append(f"  const float r{i} = {op_expression(node, operands)};")
                self.done.add(id(node))
                progress = True
        return lines


_LAUNCH = source_template("kw_row_launch.cu.in", fragment=True)

_ENTRY = source_template("kw_row_entry.cu.in", fragment=True)

# Split rows: independent blocks per row (`split` in the spec); the partials and the per-row arrival
# counters are this launch's, in the workspace the runtime allocates on the current stream, so launches on
# two streams never share them (device globals did: concurrent launches mixed their counts).
_SPLIT_ENTRY = source_template("kw_row_split_entry.cu.in", fragment=True)


# Persistent rows: each cluster walks rows block_row, block_row + row_step, ... (the launcher starts as many
# clusters as fit at once); a launch without a cluster or cache (the fallbacks) takes each row once.
_PERSISTENT_ROWS = """\
  constexpr bool PERSIST = CACHE && CL > 1;
  const int rank = static_cast<int>(blockIdx.x % CL);
  const idx_t row_step = PERSIST ? static_cast<idx_t>(gridDim.x / CL) : ROW_BLOCKS;
  int fill_pending = 0;      // cp.async groups this thread committed, one per chunk
  bool prefetched = false;   // this row's cache already fetched by the previous row's final pass
  (void)fill_pending;
  for (idx_t block_row = blockIdx.x / CL; block_row < ROW_BLOCKS; block_row += row_step) {"""


# Split rows in one launch: blocks walk items (a share of a row) in row order, so that a row's blocks run
# together and their re-reads hit L2; the two-launch fallback (phases 0 and 1, one item per block) keeps the
# side-by-side order of `_block_order`.
_ONE_LAUNCH_ROWS = """\
  for (idx_t item = blockIdx.x; item < ROW_BLOCKS * CL; item += gridDim.x) {
  const int rank = static_cast<int>(phase == 2 ? item % CL : item / ROW_BLOCKS);
  const idx_t block_row = phase == 2 ? item / CL : item % ROW_BLOCKS;"""


def _block_order(split: bool) -> str:
    """Which share (`rank`) of which rows (`block_row`) a block takes. A cluster's blocks must be
    consecutive; split rows run the same share of every row side by side instead, so that blocks working
    at the same time touch neighbouring memory (the groups of a channels-last GroupNorm interleave within
    each pixel: written a group at a time, each 512-byte pixel row was written in 64-byte pieces far apart
    in time)."""
    if split:
        return ("  const int rank = static_cast<int>(blockIdx.x / ROW_BLOCKS);\n"
                "  const idx_t block_row = blockIdx.x % ROW_BLOCKS;")
    return ("  const int rank = static_cast<int>(blockIdx.x % CL);\n"
            "  const idx_t block_row = blockIdx.x / CL;")


def _maybe_unused(line: str) -> str:
    """A row scalar declaration one phase of a split kernel may not read (the statistics phase computes
    the norm's scale, the output phase the running-stat blends)."""
    return line.replace("  const ", "  [[maybe_unused]] const ", 1)


def _digest(group: FusedGroup) -> str:
    import hashlib

    text = "|".join(f"{n.op}{n.shape}{n.attrs}" for n in group.nodes) + repr(group.config)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _ir_comment(group: FusedGroup) -> str:
    from kernelwright.ir.graph import Graph

    return format_graph(Graph(inputs=(), params=(), outputs=group.outputs))


def _reducer(column: bool) -> tuple[str, str]:
    """(the kw:: function that reduces one pass's accumulators over a block, its scratch's length)."""
    return ("column_reduce<WARPS>", "THREADS") if column else ("group_reduce<WARPS, LANES>", "THREADS / 32")
