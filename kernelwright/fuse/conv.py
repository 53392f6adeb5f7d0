"""The convolution family's matcher: a channels-last 2-D or 3-D convolution with its pointwise epilogue and
the transpose back to NCHW, or a global pool of it, as one CUTLASS implicit-GEMM kernel (`codegen/conv.py`).

After the layout pass (`rewrite/layout.py`) a convolution reads NHWC data and the graph ends its chain in
`permute(.., (0, 3, 1, 2))` back to NCHW: `conv_cl(x) -> add bias -> pointwise ... -> permute`. Without this
family cuDNN computes the conv into an NHWC tensor and the pointwise family's transposing kernel reads it
back once to apply the bias, the activations and the transpose. Here the conv's epilogue does all of that
from the accumulators: each tile is finished in registers, staged in shared memory channel-major and
stored as NCHW rows, so the conv output is written once, already transposed (H100, level2 conv 32x64x128x128
-> 128, 3x3: 0.286 ms for conv + bias + ReLU into NCHW against cuDNN's 0.241 ms for the NHWC conv alone plus
~0.18 ms for the transposing pass; bench/results/2026-11-27-h100-80gb-hbm3-conv-pingpong).

The view is the GEMM family's: M = N*P*Q output pixels, N = K output channels, K = C*R*S; epilogue tensors
are classified by how they broadcast over (M, N) exactly as for a GEMM's epilogue (a bias [K] is a "row"
operand, a per-pixel tensor a "col" one, a whole NHWC tensor "full"), and the epilogue grows by the GEMM
family's rule (`gemm._epilogue`).

Claimed only where the kernel applies: FP32, groups 1 (TMA reads 16-byte rows of x and of
the weight: where C is not a multiple of 4 the entry pads both with zero channels first, into its
workspace; the output is stored without TMA, so K is free), sizes within 32-bit indexing, the CUTLASS
headers installed, and a chain that ends in the NCHW transpose (an NHWC result feeding a norm or a pool
gains nothing over cuDNN: the reduction family already reads its epilogue in its own pass), or in a sum or
mean over each image's pixels (global average pooling, `F.adaptive_avg_pool2d(x, 1)` after the layout pass):
then the epilogue's values are summed per tile, image and channel, a second kernel adds each image's tile
sums into the [N, K] output, and the conv's output is never written nor read back (level2/15's is 520 MB).
Before the transpose, a softmax or log-softmax over the channels may follow the epilogue where there are at
most 128 of them (one tile holds a pixel's every channel): it runs on the staged tile, a thread a pixel
(level2/21), and pointwise ops of it (`_post_chain`) are applied by the store (level2/27). Or a reduction
over those channels (`CHANNEL_REDUCTIONS`) and pointwise ops of it end the chain: one value a pixel is
stored, the conv's output never (level2/26's min: 0.074 ms against torch.compile's 0.121, H200). Or the
epilogue's value is stored NHWC for other kernels and its per-channel statistics over
every pixel (`sum`, `mean`, `var` over dims (0, 1, 2): a train-mode BatchNorm's, after `norms_apart`, and
its running statistics' updates) or per image (dims (1, 2): an InstanceNorm's) are computed from the staged
tile: each tile's sum and squared deviations from their own mean per channel and image, combined (law of
total variance, in float64) by two small kernels, so that conv + BatchNorm + ReLU reads the conv's output
once, in the normalizing kernel, instead of twice (level2/02: 268 MB, ~70 us of the H200's bandwidth).
Whether the kernel beats cuDNN plus the pointwise kernel is measured (`compiler.py` builds the channels-last
plan with and without this family). On by default (`optimize --no-conv-kernels`,
`OptimizeOptions.conv_kernels`): kept on 3-4 of the 6 bundled problems it applied to, 10-34% faster than the
cuDNN plan (H100, 2026-11-27); it costs ~30 s of nvcc a problem that has such a conv.
A transposed 2-D conv (dilation 1, a stride along W of 1, 2 or 4) is computed an output phase at a time
(`phases`): output rows s*j + r along H are a stride-1 correlation of x with the kernel's taps of that
phase, flipped, so each phase along H is a launch of the same kernel, and the phases along W are the GEMM's
columns side by side (their windows the union of theirs: up to 1.5x the multiply-adds at 3x3 or 4x4,
stride 2), so that a tile holds whole output rows and the NCHW store writes them interleaved, 16 bytes a
lane. Claimed where its chain ends in the transpose to NCHW (after a softmax over the channels where every
phase's channels fit a tile) or in a reduction over the channels. The phase weights are gathered from the
conv's weight by a small kernel on every call.
A 3-D conv (NDHWC after the layout pass) is the same kernel with TMA's five-dim im2col: its M the output
pixels (image, depth, row, column), everything above holds with an image's pixels its depth x height x
width, and a transposed one's output phases along D are launches as those along H are (level2/28's
ConvTranspose3d: 0.18 ms against cuDNN's dgrad 0.51, H200). A transposed conv of stride 1 is one launch, the
correlation with its kernel flipped: a conv's, with every store a conv has.
The kernel computes in TF32, as eager's cuDNN convolutions do by default, and is claimed only while
`torch.backends.cudnn.allow_tf32` is set; the judge's float64 rule rejects it where cuDNN would have been
exact (it picks exact FP32 algorithms for some shapes), and the plan without it is kept.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from kernelwright.environment import cutlass_include_dir, hopper_gpu
from kernelwright.fuse import gemm
from kernelwright.fuse.gemm import EpilogueOperand, GemmView
from kernelwright.fuse.plan import FusedGroup, Partition, descendants, make_group
from kernelwright.fuse.pointwise import is_pointwise
from kernelwright.fuse.statistics import affine
from kernelwright.ir.graph import Graph, Node
from kernelwright.ir.ops import const_node, make_node

# The spatial dims the kernel takes: 2-D convs (NHWC tensors) and 3-D ones (NDHWC).
SPATIAL_DIMS = (2, 3)
# Below this many multiply-adds (~0.13 GFLOP: well under a microsecond of the tensor cores) a conv is bound by
# its launch, cuDNN often computes it in exact FP32 (which TF32 cannot match under the judge) and the ~30 s
# of nvcc the kernel costs are not repaid.
MIN_CONV_MACS = 1 << 26
# The kernel's dims and strides are 32-bit.
MAX_ELEMENTS = 2**31 - 1
# A pooled conv sums each 128-pixel tile per image (a warp reduction and a stored sum per channel and image
# the tile holds): below this many pixels an image a tile holds many images, each another pass over it.
MIN_POOLED_PIXELS = 32
# A softmax over the channels runs on the staged tile, whose 128 (or 64) channels must then be all of them.
MAX_ROW_CHANNELS = 128
# The per-channel statistics the epilogue computes (over dims (0, 1, 2) of its NHWC value).
STATISTICS = frozenset({"sum", "mean", "var"})
# The reductions over the channels the epilogue computes, in registers (every channel in one tile, as for a
# softmax).
CHANNEL_REDUCTIONS = ("sum", "mean", "amax", "amin", "logsumexp")


@dataclass(frozen=True)
class ConvView:
    """A conv group read as a problem: x [N, H, W, C] and w [K, R, S, C] (both contiguous), the geometry,
    the epilogue (as a GEMM's: `gemm.view` holds its operands and nodes) and the NCHW output."""

    anchor: Node
    x: Node
    w: Node
    n: int
    h: int
    w_in: int
    c: int
    k: int
    r: int
    s: int
    p: int
    q: int
    padding: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    gemm: GemmView
    output: Node
    # after the epilogue, over the channels: a softmax or log-softmax, or a reduction (`CHANNEL_REDUCTIONS`)
    row: Node | None = None
    post: tuple[Node, ...] = ()   # pointwise ops of the row's value, applied as it is stored
    # per-channel statistics of `output` (then the epilogue's value, stored NHWC): sum, mean or var nodes
    statistics: tuple[Node, ...] = ()
    # a transposed conv (w [C, R, S, K]), computed a phase of its output at a time (`phases`), stored NCHW
    transposed: bool = False
    # a 3-D conv's depths (x [N, D, H, W, C], w [K, T, R, S, C], output depth Z; padding, stride and dilation
    # then (depth, height, width)): 1 for a 2-D one
    d: int = 1
    t: int = 1
    z: int = 1

    @property
    def pooled(self) -> bool:
        """Whether the output is the epilogue's values summed over each image's pixels (for a mean scaled by
        1 / (P * Q) in the launcher, whose sizes are arguments), [N, K], instead of all stored NCHW."""
        return _is_spatial_pool(self.output)

    @property
    def reduced(self) -> bool:
        """Whether the output is the epilogue's values reduced over the channels ([N, P, Q], or [N, P, Q, 1]
        kept), then `post`: a value a pixel stored, the conv's output never."""
        return self.row is not None and self.row.op in CHANNEL_REDUCTIONS

    @property
    def post_view(self) -> GemmView:
        """The pointwise ops after the row as an epilogue of the row's value (`gemm` has their operands)."""
        return dataclasses.replace(self.gemm, anchor=self.row or self.anchor, epilogue=self.post,
                                   output=self.post[-1] if self.post else self.row or self.anchor)

    @property
    def per_image(self) -> bool:
        """Whether the statistics are per image and channel (an InstanceNorm's), not per channel."""
        return bool(self.statistics) and _statistic_dims(self.statistics[0])[0] == 1

    @property
    def c_padded(self) -> int:
        """C rounded up to a multiple of 4, the channels the kernel reads (`codegen/conv.py` pads)."""
        return -(-self.c // 4) * 4

    @property
    def rank(self) -> int:
        """The spatial dims: 2 or 3."""
        return len(self.stride)

    @property
    def layout(self) -> str:
        return "NDHWC" if self.rank == 3 else "NHWC"

    @property
    def pixels(self) -> int:
        return self.n * self.z * self.p * self.q

    @property
    def input_pixels(self) -> int:
        return self.n * self.d * self.h * self.w_in

    @property
    def macs(self) -> int:
        """The multiply-adds of the conv (a transposed one's: each input pixel's into T*R*S output pixels)."""
        pixels = self.input_pixels if self.transposed else self.pixels
        return pixels * self.k * self.c * self.t * self.r * self.s

    @property
    def phased(self) -> bool:
        """Whether the conv is computed an output phase at a time (a transposed conv with a stride over 1; one
        of stride 1 is the correlation with its kernel flipped, a conv's launch)."""
        return is_phased(self.anchor)

    @property
    def phases_w(self) -> int:
        """The GEMM's columns per output channel (`phases_w`)."""
        return phases_w(self.anchor)

    @property
    def columns(self) -> int:
        """The GEMM's columns: the channels, or a transposed conv's channels times its phases along W."""
        return self.k * self.phases_w

    def phases(self) -> tuple[tuple[Phase, ...], tuple[Phase, ...], tuple[Phase, ...]]:
        """A transposed conv's output phases along D and H (each pair its own launch) and W (the GEMM's
        columns); along D one phase of one tap for a 2-D conv."""
        depth = (phases(self.d, self.z, self.t, self.stride[0], self.padding[0], False) if self.rank == 3
                 else (Phase(1, 0, 0, (0,)),))
        return (depth, phases(self.h, self.p, self.r, self.stride[-2], self.padding[-2], False),
                phases(self.w_in, self.q, self.s, self.stride[-1], self.padding[-1], True))

    @property
    def operands(self) -> tuple[EpilogueOperand, ...]:
        return self.gemm.operands

    @property
    def epilogue(self) -> tuple[Node, ...]:
        return self.gemm.epilogue


def available() -> bool:
    """Whether the kernel can be claimed here: TF32 only where eager's convolutions use it too (PyTorch's
    default), on an sm_90a GPU with the CUTLASS headers installed."""
    return cutlass_include_dir() is not None and hopper_gpu() and torch.backends.cudnn.allow_tf32


def match(graph: Graph, claimed: frozenset[int]) -> list[FusedGroup]:
    if not available():
        return []
    users = graph.users()
    roots = {id(n) for n in graph.roots()}
    partition = Partition(graph, users)
    groups = []
    for anchor in graph.nodes():
        if anchor.op != "conv" or id(anchor) in claimed or not claimable(anchor):
            continue
        view = _gemm_view(anchor)
        members = gemm._epilogue(anchor, view, users, roots, claimed, partition, [anchor])
        last = members[-1] if members else anchor
        readers = _readers(last, users)
        tail = _row_tail(anchor, [anchor, *members], users, roots, claimed)
        if tail is not None:
            nodes = [anchor, *members, *tail]
        elif is_phased(anchor) and (id(last) in roots or len(readers) != 1
                                     or id(readers[0]) in claimed or not _is_to_nchw(readers[0])):
            # stored NHWC for other kernels the phased kernel lost to cuDNN: from the registers (a phase's
            # pixels are not adjacent) 0.13 ms against cuDNN's 0.07 for level2/26's conv, while the same
            # launches with the NCHW store took 0.05 (H200, bench/results/2026-11-29-h200-s44)
            continue
        else:
            statistics = [r for r in readers if _is_channel_statistic(r) and id(r) not in claimed]
            # of one kind (per image or over all images): the others read the stored value
            statistics = [r for r in statistics if _statistic_dims(r) == _statistic_dims(statistics[0])]
            if statistics and len(statistics) < len(readers):
                # stored NHWC for the other readers, its statistics computed from the staged tiles (a global
                # pool read alone is the pooled store's, below: nothing stored)
                nodes = [anchor, *members, *statistics]
                if partition.is_convex(nodes):
                    partition.add(nodes)
                    groups.append(make_group(graph, "conv", nodes, users=users))
                continue
            if id(last) in roots or len(readers) != 1 or id(readers[0]) in claimed:
                continue
            if not (_is_to_nchw(readers[0]) or _is_spatial_pool(readers[0])):
                continue
            nodes = [anchor, *members, readers[0]]
        if not partition.is_convex(nodes):
            continue
        partition.add(nodes)
        groups.append(make_group(graph, "conv", nodes, users=users))
    return groups


def _readers(node: Node, users: dict) -> list[Node]:
    return list({id(r): r for r in users[id(node)]}.values())


def _row_tail(anchor: Node, prefix: list[Node], users: dict, roots: set[int],
              claimed: frozenset[int]) -> list[Node] | None:
    """What follows the epilogue `prefix` (the conv and its pointwise ops) over each pixel's channels: a
    softmax over them, pointwise ops of it (`_post_chain`) and the transpose to NCHW, or a reduction over
    them and pointwise ops of it, stored a value a pixel. None where neither follows."""
    last = prefix[-1]
    readers = _readers(last, users)
    if id(last) in roots or len(readers) != 1 or id(readers[0]) in claimed:
        return None
    row = readers[0]
    softmax = _is_channel_softmax(row, anchor)
    if not (softmax or _is_channel_reduction(row, anchor)):
        return None
    post = _post_chain(anchor, prefix, row, users, roots, claimed)
    if not softmax:
        return [row, *post]
    end = post[-1] if post else row
    readers = _readers(end, users)
    if id(end) in roots or len(readers) != 1 or id(readers[0]) in claimed or not _is_to_nchw(readers[0]):
        return None
    return [row, *post, readers[0]]


def _post_chain(anchor: Node, prefix: list[Node], row: Node, users: dict, roots: set[int],
                claimed: frozenset[int]) -> list[Node]:
    """The pointwise ops after a channel row, each reading the last, of its shape, applied as the row's value
    is stored: each other tensor they read an epilogue tensor (after a softmax: broadcast over the conv's
    output as the epilogue's; after a reduction: one value, or one a pixel where the channel dim is kept), at
    most MAX_EPILOGUE_OPERANDS with the epilogue's."""
    inside = {id(n) for n in prefix}
    operands = {id(i) for n in prefix[1:] for i in n.inputs if id(i) not in inside and i.op != "const"}
    computed = descendants(anchor, users)
    dim_groups = _gemm_view(anchor).dim_groups
    reduced = not _is_channel_softmax(row)
    chain: list[Node] = []
    node = row
    while id(node) not in roots:
        readers = _readers(node, users)
        if len(readers) != 1:
            break
        user = readers[0]
        if (id(user) in claimed or not is_pointwise(user) or tuple(user.shape) != tuple(row.shape)
                or user.dtype != torch.float32):
            break
        others = [i for i in user.inputs if i is not node and i.op != "const"]
        kinds = [gemm._classify(i, anchor.shape, dim_groups) for i in others]
        if any(id(i) in computed for i in others) or any(k is None for k in kinds):
            break
        if reduced and any(k.kind != "col" or (len(row.shape) != len(anchor.shape) and i.numel != 1)
                           for i, k in zip(others, kinds, strict=True)):
            break
        if len(operands | {id(i) for i in others}) > gemm.MAX_EPILOGUE_OPERANDS:
            break
        operands |= {id(i) for i in others}
        chain.append(user)
        node = user
    return chain


def claimable(anchor: Node) -> bool:
    """A channels-last 2-D or 3-D convolution the kernel computes (see the module docstring): an fprop one,
    or a transposed one of dilation 1 whose output phases it can compute (`phases`)."""
    rank = len(anchor.shape) - 2
    if not (anchor.attr("channels_last") and anchor.attr("groups") == 1 and not anchor.attr("has_bias")
            and rank in SPATIAL_DIMS and len(anchor.attr("stride")) == rank and len(anchor.inputs) == 2):
        return False
    x, w = anchor.inputs
    tensors = (anchor, x, w)
    if not all(t.dtype == torch.float32 and 0 < t.numel <= MAX_ELEMENTS for t in tensors):
        return False
    if anchor.attr("transposed"):
        return _transposed_ok(anchor)
    geometry = zip(w.shape[1:-1], anchor.attr("padding"), anchor.attr("stride"), anchor.attr("dilation"),
                   strict=True)
    return math.prod(anchor.shape) * math.prod(w.shape[1:]) >= MIN_CONV_MACS and all(
        _im2col_ok(taps, pad, pad, stride, dilation, rank) for taps, pad, stride, dilation in geometry)


def _im2col_ok(taps: int, lower: int, upper: int, stride: int, dilation: int, rank: int) -> bool:
    """Whether TMA's im2col mode addresses one spatial dim of a `rank`-D conv with paddings (lower, upper):
    CUTLASS's `can_implement` for sm90 fprop (corners in [-2^(16/rank - 1), 2^(16/rank - 1) - 1]: [-128, 127]
    in 2-D, [-16, 15] in 3-D; filter offsets under 2^(16/rank) - 1) and cuTensorMapEncodeIm2col (element
    strides of at most 8)."""
    corner, reach = 1 << (16 // rank - 1), (taps - 1) * dilation
    return (0 <= lower <= corner and 0 <= upper <= corner and -corner <= upper - reach < corner
            and reach < 2 * corner - 1 and 1 <= stride <= 8)


@dataclass(frozen=True)
class Phase:
    """The outputs s*j + r (j < count) of a transposed conv along one dim, for one r < s (its stride): each
    the stride-1 correlation of the input padded by (lower, upper) with a window whose tap u is the kernel's
    tap `taps[u]` (None: a zero weight)."""

    count: int
    lower: int
    upper: int
    taps: tuple[int | None, ...]


# Transposed convs: the output phases along W are computed side by side as the GEMM's columns (phase r of
# channel k is column k * s + r), so that a tile holds whole output rows; a tile of 64 or 128 columns must
# then hold every phase of its channels.
PHASE_STRIDES = (1, 2, 4)
# The most taps a launch's phase weights gather (its window's taps times the phases along W: the template's
# `PhaseTaps` table, passed by value to the gathering kernel).
MAX_PHASE_TAPS = 256


def phases(size: int, out: int, kernel: int, stride: int, padding: int, shared: bool) -> tuple[Phase, ...]:
    """A transposed conv's output phases along one dim (input `size`, output `out`; dilation 1). Output
    s*j + r sums x[j + c_r - t] * w[t0 + s*t] over t < T (t0 = (r + p) mod s, c_r = (r + p) div s, T the taps
    t0 + s*t < kernel): a stride-1 correlation. `shared`: every phase's window the union of theirs (one
    window and one pixel grid, so the phases can be columns of one GEMM; their taps outside their own range
    zero), else each its own."""
    spans = []
    for r in range(stride):
        first, offset = (r + padding) % stride, (r + padding) // stride
        spans.append((first, offset, -(-(kernel - first) // stride)))
    result = []
    for r, (first, offset, count) in enumerate(spans):
        if shared:
            lower = -min(o - t + 1 for _, o, t in spans)
            width = max(o for _, o, _ in spans) + lower + 1
            outputs = -(-out // stride)
        else:
            lower, width, outputs = count - 1 - offset, count, -(-(out - r) // stride)
        taps = []
        for u in range(width):
            t = offset + lower - u
            taps.append(first + stride * t if 0 <= t < count else None)
        result.append(Phase(outputs, lower, outputs - size - lower + width - 1, tuple(taps)))
    return tuple(result)


def phases_w(anchor: Node) -> int:
    """A conv's GEMM columns per output channel: a transposed conv's phases along W (its stride), else 1."""
    return anchor.attr("stride")[-1] if anchor.attr("transposed") else 1


def is_phased(anchor: Node) -> bool:
    """Whether a conv is computed an output phase at a time: a transposed one with a stride over 1."""
    return bool(anchor.attr("transposed")) and any(s > 1 for s in anchor.attr("stride"))


def _transposed_ok(anchor: Node) -> bool:
    """Whether the kernel computes a transposed conv: a stride along W in PHASE_STRIDES, dilation 1, each
    output phase a correlation TMA's im2col addresses (every phase at least one tap), and enough work."""
    x, w = anchor.inputs
    rank = len(anchor.shape) - 2
    if any(d != 1 for d in anchor.attr("dilation")) or anchor.attr("stride")[-1] not in PHASE_STRIDES:
        return False
    if math.prod(x.shape) * math.prod(w.shape[1:]) < MIN_CONV_MACS:
        return False
    shared = (False,) * (rank - 1) + (True,)
    taps = anchor.attr("stride")[-1]
    for size, out, kernel, stride, padding, along_w in zip(
            x.shape[1:-1], anchor.shape[1:-1], w.shape[1:-1], anchor.attr("stride"), anchor.attr("padding"),
            shared, strict=True):
        if kernel < stride:
            return False
        windows = phases(size, out, kernel, stride, padding, along_w)
        for phase in windows:
            if not (phase.count >= 1 and _im2col_ok(len(phase.taps), phase.lower, phase.upper, 1, 1, rank)):
                return False
        taps *= max(len(phase.taps) for phase in windows)
    return taps <= MAX_PHASE_TAPS


def describe(group: FusedGroup) -> ConvView:
    """The convolution a group computes (the renderer's view of it)."""
    anchors = [n for n in group.nodes if n.op == "conv"]
    statistics = tuple(n for n in group.nodes if _is_channel_statistic(n))
    if not any(s.inputs[0] is o for s in statistics[:1] for o in group.outputs):
        statistics = ()     # a global pool, its value not stored
    if len(anchors) != 1:
        raise ValueError("a conv group has one conv")
    anchor = anchors[0]
    if statistics:
        output = statistics[0].inputs[0]
        if (any(s.inputs[0] is not output or _statistic_dims(s) != _statistic_dims(statistics[0])
                for s in statistics) or group.outputs != (output, *statistics)):
            raise ValueError("a conv group's statistics are of one kind, of its one NHWC output, stored too")
    else:
        output = group.outputs[0]
    rows = [j for j, n in enumerate(group.nodes) if _is_channel_softmax(n) or _is_channel_reduction(n)]
    row = group.nodes[rows[0]] if rows else None
    reduced = row is not None and row.op in CHANNEL_REDUCTIONS
    # after the row, the pointwise ops the store applies (then a softmax's transpose to NCHW)
    post = tuple(n for n in group.nodes[rows[0] + 1:] if reduced or n is not output) if rows else ()
    if not statistics and (len(group.outputs) != 1 or not (
            _is_to_nchw(output) or _is_spatial_pool(output) or reduced and output is (post or (row,))[-1])):
        raise ValueError("a conv group has one output, the NCHW transpose, a spatial pool or a reduction "
                         "over the channels, or its statistics")
    if is_phased(anchor) and not (_is_to_nchw(output) or reduced):
        raise ValueError("a phased conv's group stores its value NCHW or reduced over the channels")
    apart = {id(n) for n in (anchor, row, *post, *statistics)} | ({id(output)} if not statistics else set())
    epilogue = tuple(n for n in group.nodes if id(n) not in apart)
    base = gemm.with_epilogue(_gemm_view(anchor), group, epilogue + post, anchor)
    view = dataclasses.replace(base, epilogue=epilogue, output=epilogue[-1] if epilogue else anchor)
    x, w = anchor.inputs
    n, *outputs, k = anchor.shape
    _, *sizes, c = x.shape
    _, *kernel, _ = w.shape
    depth = dict(d=sizes[0], t=kernel[0], z=outputs[0]) if len(outputs) == 3 else {}
    return ConvView(anchor, x, w, n, sizes[-2], sizes[-1], c, k, kernel[-2], kernel[-1], outputs[-2],
                    outputs[-1], tuple(anchor.attr("padding")), tuple(anchor.attr("stride")),
                    tuple(anchor.attr("dilation")), view, output, row, post, statistics,
                    bool(anchor.attr("transposed")), **depth)


def _gemm_view(anchor: Node) -> GemmView:
    """The conv as the GEMM family sees an anchor: output dims (N, [Z,] P, Q) form M, the channels N."""
    x, w = anchor.inputs
    rank = len(anchor.shape)
    return GemmView(anchor, x, False, w, True, 1, math.prod(anchor.shape[:-1]), anchor.shape[-1],
                    math.prod(w.shape[1:]), ((), tuple(range(rank - 1)), (rank - 1,)), (), (), anchor)


def to_nchw(rank: int) -> tuple[int, ...]:
    """NHWC (NDHWC) -> NCHW (NCDHW): the permute the layout pass leaves after a channels-last conv chain."""
    return (0, rank - 1, *range(1, rank - 1))


def _is_to_nchw(node: Node) -> bool:
    return node.op == "permute" and tuple(node.attr("dims")) == to_nchw(len(node.shape))


def _channels_last(node: Node) -> bool:
    """Whether a node has a conv's channels-last rank: NHWC or NDHWC."""
    return len(node.shape) - 2 in SPATIAL_DIMS


def _is_channel_softmax(node: Node, anchor: Node | None = None) -> bool:
    """A softmax or log-softmax over the channels of an NHWC tensor (its last dim) with at most
    MAX_ROW_CHANNELS (of a transposed conv, `anchor`: that many channels times its phases along W, the
    tile's columns)."""
    rank = len(node.shape)
    return (node.op in ("softmax", "log_softmax") and _channels_last(node)
            and node.attr("dim") % rank == rank - 1 and _fits_tile(node.shape[-1], anchor))


def _is_channel_reduction(node: Node, anchor: Node | None = None) -> bool:
    """A float32 reduction over the channels of an NHWC tensor (its last dim, kept or not) whose columns fit a
    tile as a softmax's must (`_is_channel_softmax`)."""
    if node.op not in CHANNEL_REDUCTIONS or len(node.inputs) != 1 or node.dtype != torch.float32:
        return False
    source = node.inputs[0]
    rank = len(source.shape)
    return (_channels_last(source) and tuple(d % rank for d in node.attr("dims")) == (rank - 1,)
            and _fits_tile(source.shape[-1], anchor))


def _fits_tile(channels: int, anchor: Node | None) -> bool:
    """Whether every column of `channels` (of a transposed conv `anchor`: times its phases along W) fits one
    tile, so that a pixel's row of them is whole in it."""
    return channels * (phases_w(anchor) if anchor is not None else 1) <= MAX_ROW_CHANNELS


def _spatial(rank: int) -> tuple[int, ...]:
    """The spatial dims of a channels-last tensor of `rank` dims: (1, 2) of NHWC, (1, 2, 3) of NDHWC."""
    return tuple(range(1, rank - 1))


def _is_spatial_pool(node: Node) -> bool:
    """A sum or mean over the spatial dims of an NHWC (NDHWC) tensor (global average pooling: [N, P, Q, K]
    -> [N, K], or [N, 1, 1, K] kept), over at least MIN_POOLED_PIXELS pixels an image."""
    if node.op not in ("sum", "mean") or len(node.inputs) != 1:
        return False
    source = node.inputs[0]
    rank = len(source.shape)
    return (_channels_last(source) and tuple(sorted(d % rank for d in node.attr("dims"))) == _spatial(rank)
            and math.prod(source.shape[1:-1]) >= MIN_POOLED_PIXELS)


def _is_channel_statistic(node: Node) -> bool:
    """A float32 sum, mean or var of a channels-last conv chain's value per channel, over every pixel of
    every image (dims (0, 1, 2) of NHWC) or per image (dims (1, 2))."""
    if node.op not in STATISTICS or len(node.inputs) != 1 or node.dtype != torch.float32:
        return False
    rank = len(node.inputs[0].shape)
    return _channels_last(node.inputs[0]) and _statistic_dims(node) in ((0, *_spatial(rank)), _spatial(rank))


def _statistic_dims(node: Node) -> tuple[int, ...]:
    rank = len(node.inputs[0].shape)
    return tuple(sorted(d % rank for d in node.attr("dims")))


def norms_apart(graph: Graph) -> Graph:
    """`graph` with each train-mode BatchNorm, and each GroupNorm (an InstanceNorm: one channel a group), of
    a channels-last conv chain the conv kernel can claim (its input reached from a claimable conv through
    pointwise ops of its shape) split into its statistics and the apply, which the conv's epilogue and the
    pointwise family then compute:

        y = norm(x, w, b)  ->  mean = mean(x, dims); var = var(x, dims, correction=0)
                               y = (x - mean) * rsqrt(var + eps) * w + b

    dims (0, 1, 2) for a BatchNorm (per channel), (1, 2) for a GroupNorm (per image and channel, then its
    groups' from its channels', `_group_moments`: level2/28's 16 channels a group). Each
    split is built on the rebuilt graph upstream of it (a network's next conv reads the last split's apply).
    A BatchNorm's running statistics' updates already read x with their own mean and var."""
    if not available():
        return graph
    done: dict[int, Node] = {}
    changed = False
    for node in graph.nodes():
        if node.is_leaf:
            done[id(node)] = node
            continue
        inputs = tuple(done.get(id(i), i) for i in node.inputs)
        same = all(a is b for a, b in zip(inputs, node.inputs, strict=True))
        fresh = node if same else node.with_(inputs=inputs)
        dims = _norm_dims(node)
        if dims is not None and _after_claimable_conv(node):
            fresh = _norm_apply(fresh, dims)
            changed = True
        done[id(node)] = fresh
    if not changed:
        return graph
    return graph.with_(outputs=tuple(done[id(n)] for n in graph.outputs),
                       mutations=tuple((fqn, done[id(n)]) for fqn, n in graph.mutations))


def _norm_dims(norm: Node) -> tuple[int, ...] | None:
    """The dims a norm of an NHWC value reduces, where the epilogue can compute its statistics."""
    rank = len(norm.shape)
    if norm.dtype != torch.float32 or not _channels_last(norm) or norm.attr("channel_dim") != rank - 1:
        return None
    if norm.op == "batch_norm" and norm.attr("training") and not norm.attr("has_running"):
        return (0, *_spatial(rank))
    if norm.op == "group_norm":
        return _spatial(rank)     # per image and channel; a group's channels combined by `_norm_apply`
    return None


def _after_claimable_conv(norm: Node) -> bool:
    node = norm.inputs[0]
    while node.op != "conv":
        # back through the pointwise epilogue: its one computed input of the same shape
        computed = [i for i in node.inputs if not i.is_leaf and tuple(i.shape) == tuple(node.shape)]
        if not is_pointwise(node) or len(computed) != 1:
            return False
        node = computed[0]
    # (a phased conv's group takes no statistics)
    return tuple(node.shape) == tuple(norm.shape) and not is_phased(node) and claimable(node)


def _norm_apply(norm: Node, dims: tuple[int, ...]) -> Node:
    """The normalized x from its statistics over `dims`, as pointwise ops (the statistics keep their dims;
    a GroupNorm's of several channels a group combined from its channels', `_group_moments`)."""
    x = norm.inputs[0]
    mean = make_node("mean", [x], dims=dims, keepdim=True)
    var = make_node("var", [x], dims=dims, correction=0, keepdim=True)
    if norm.op == "group_norm" and norm.attr("groups") != x.shape[-1]:
        mean, var = _group_moments(mean, var, norm.attr("groups"))
    rstd = make_node("rsqrt", [make_node("add", [var, const_node(float(norm.attr("eps")))])])
    y = make_node("mul", [make_node("sub", [x, mean]), rstd])
    for op, vector in affine(norm):
        y = make_node(op, [y, vector])
    return y


def _group_moments(mean: Node, var: Node, groups: int) -> tuple[Node, Node]:
    """A GroupNorm's mean and (population) var per image and group from its channels' [N, 1.., C]: each
    group's channels hold equally many pixels, so its mean is theirs averaged and its var, by the law of total
    variance, their vars' mean plus the mean squared spread of their means about it (no cancellation: every
    term is non-negative). On [N, G, C / G] values, broadcast back to [N, 1.., C]."""
    shape, n, c = tuple(mean.shape), mean.shape[0], mean.shape[-1]
    grouped = (n, groups, c // groups)
    means = make_node("reshape", [mean], shape=grouped)
    group_mean = make_node("mean", [means], dims=(2,), keepdim=True)
    spread = make_node("sub", [means, group_mean])
    variances = make_node("reshape", [var], shape=grouped)
    spreads = make_node("add", [variances, make_node("mul", [spread, spread])])
    group_var = make_node("mean", [spreads], dims=(2,), keepdim=True)
    return tuple(make_node("reshape", [make_node("expand", [t], shape=grouped)], shape=shape)
                 for t in (group_mean, group_var))
