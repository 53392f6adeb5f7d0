"""The reduction and scan matchers on hand-built graphs: what each group claims, how it is launched,
and what stays out."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "codegen"))
from reduction_cases import (  # noqa: E402
    CASES,
    batch_norm_train,
    cosine_similarity_loss,
    group_norm,
    l2_normalize,
    layer_norm,
    log_softmax_divergence,
    one,
    residual_batch_norms,
    rms_norm,
    smooth_l1_mean,
)

from kernelwright.fuse import plan_fusion  # noqa: E402
from kernelwright.fuse.plan import AtenStep  # noqa: E402
from kernelwright.ir.graph import Graph  # noqa: E402
from kernelwright.ir.ops import const_node, input_node, make_node, param_node  # noqa: E402


def groups_of(graph: Graph, family: str):
    return [g for g in plan_fusion(graph).groups if g.family == family]


def test_rms_norm_by_hand_is_one_kernel_reading_x_once():
    graph = rms_norm((4, 37, 3071))
    (group,) = groups_of(graph, "reduction")
    assert [n.op for n in group.nodes] == ["pow", "mean", "add", "rsqrt", "mul", "mul"]
    assert [n.name for n in group.inputs] == ["x", "weight"]
    spec = group.config[0]
    assert spec.layout == "row" and spec.cache and spec.passes == 2
    assert all(isinstance(s, type(group)) for s in plan_fusion(graph).steps)


def test_reductions_of_the_same_rows_through_their_own_prologues_share_one_read():
    """Cosine similarity: |x|, |y| and the dot product of the normalized rows. The norm of y reads y
    through y * y, a pointwise op no member reads: it is found from the group's other reader of y, so
    x and y are read once, in one kernel (was: a kernel for |y| and a second reading y again)."""
    graph = cosine_similarity_loss((33, 10241))
    (group,) = groups_of(graph, "reduction")
    assert [n.name for n in group.inputs] == ["x", "y"]
    assert [n.op for n in group.nodes].count("sum") == 3 and len(plan_fusion(graph).steps) == 1
    spec = group.config[0]
    assert spec.layout == "row" and spec.cache and spec.passes == 2


def test_a_bool_predicate_in_the_prologue_joins_and_stays_out_when_read_elsewhere():
    """SmoothL1: |d| < 1 is a bool value inside the prologue (`where` picks the branch): one kernel reading
    x and y, no full-size intermediate. When the predicate is also an output, it is computed elsewhere and
    the kernel (which reads float tensors only) leaves its reader out too."""
    (group,) = groups_of(smooth_l1_mean((129, 4099)), "reduction")
    assert [n.name for n in group.inputs] == ["x", "y"] and "where" in [n.op for n in group.nodes]
    assert len(plan_fusion(smooth_l1_mean((129, 4099))).steps) == 1
    graph = smooth_l1_mean((129, 4099), mask_out=True)
    (group,) = groups_of(graph, "reduction")
    assert all(n.dtype == torch.float32 for n in group.inputs) and "where" not in [n.op for n in group.nodes]


def test_a_norm_over_the_same_rows_read_by_a_member_joins_as_an_earlier_pass():
    """A reduction or norm whose result a member reads (bn2(y) in bn1(x) + bn2(y), log_softmax(t) in
    log_softmax(t) - log_softmax(s)) joins the group with its prologue: one kernel, no intermediate."""
    (group,) = groups_of(residual_batch_norms((4, 6, 13, 11)), "reduction")
    assert [n.op for n in group.nodes].count("batch_norm") == 2 and len(group.outputs) == 5
    assert [n.name for n in group.inputs][:1] == ["x"] and "y" in [n.name for n in group.inputs]
    (group,) = groups_of(log_softmax_divergence((37, 1001)), "reduction")
    assert [n.op for n in group.nodes].count("log_softmax") == 2
    assert sorted(n.name for n in group.inputs) == ["s", "t"] and len(group.outputs) == 1


def test_batch_norm_training_fuses_output_and_running_stat_updates():
    graph = batch_norm_train((8, 6, 13, 11))
    (group,) = groups_of(graph, "reduction")
    ops = [n.op for n in group.nodes]
    assert {"batch_norm", "mean", "var"} <= set(ops) and ops.count("add") == 2
    assert len(group.outputs) == 3          # y and the two new running stats
    assert group.config[0].space.reduce == (0, 2, 3)
    assert not [s for s in plan_fusion(graph).steps if isinstance(s, AtenStep)]


def test_channels_last_batch_norm_fuses_like_the_channels_first_one():
    """On [N, H, W, C] data (channel_dim 3) the channels are the kept, innermost dim: lanes own channels
    (the column layout), and the running-stat blends, [C] vectors that are both keepdim rows and squeezed
    ones, still join as row values (as on [N, C], where they used to stay two pointwise kernels)."""
    graph = batch_norm_train((4, 6, 5, 24), channel_dim=3, epilogue="relu")
    (group,) = groups_of(graph, "reduction")
    ops = [n.op for n in group.nodes]
    assert {"batch_norm", "relu", "mean", "var"} <= set(ops) and ops.count("add") == 2
    assert len(group.outputs) == 3 and len(plan_fusion(graph).groups) == 1
    spec = group.config[0]
    assert spec.space.reduce == (0, 1, 2) and spec.space.rows == 24 and spec.layout == "column"
    # the same on [N, C] (BatchNorm1d after a Linear)
    (group,) = groups_of(CASES["batch_norm_train_1d"](), "reduction")
    assert [n.op for n in group.nodes].count("add") == 2 and len(group.outputs) == 3


def test_channels_last_group_norm_splits_the_last_dim_into_groups():
    (group,) = groups_of(CASES["group_norm_nhwc"](), "reduction")
    assert [n.op for n in group.nodes] == ["group_norm", "relu"]
    spec = group.config[0]
    assert spec.space.split == (1, 1, 1, 2) and spec.space.domain == (2, 7, 9, 4, 8)
    assert spec.space.reduce == (1, 2, 4) and spec.space.rows == 8 and spec.space.row_length == 7 * 9 * 8
    assert spec.layout == "row" and spec.vec == 4       # a group's 8 channels are contiguous
    (group,) = groups_of(CASES["group_norm_ndhwc"](), "reduction")
    assert group.config[0].space.domain == (2, 3, 4, 5, 4, 4) and group.config[0].space.reduce == (1, 2, 3, 5)
    # one channel per group (instance norm): the kept (sample, channel) pairs are innermost
    (group,) = groups_of(CASES["group_norm_nhwc_instance"](), "reduction")
    assert group.config[0].space.rows == 3 * 40 and group.config[0].layout == "column"


def test_layer_norm_by_hand_takes_three_passes():
    (group,) = groups_of(CASES["layer_norm_by_hand"](), "reduction")
    assert group.config[0].passes == 3     # mean, then mean of squared deviations, then the output


def test_group_norm_splits_channels_into_groups():
    (group,) = groups_of(CASES["group_norm"](), "reduction")
    space = group.config[0].space
    assert space.domain == (4, 3, 4, 9, 11) and space.reduce == (2, 3, 4) and space.rows == 12


def test_long_softmax_rows_use_a_cluster_holding_the_row_on_chip():
    spec = groups_of(one("softmax", (4096, 393216), dim=1), "reduction")[0].config[0]
    # 1.5 MB rows: two blocks per SM would need clusters of 16, which pack poorly; 8 blocks of one per SM,
    # of 32 warps (the SM's only block)
    assert spec.cluster == 8 and spec.cache and spec.vec == 4 and spec.threads == 1024
    assert 227 * 1024 // 2 < 393216 * 4 // spec.cluster <= 227 * 1024 - 8 * 1024


def test_rows_cached_across_a_cluster_are_also_measured_read_twice_and_persistent():
    """A cluster's row cache reads the row once but reduces while HBM idles: `launch_alternatives` offers
    the uncached launch of the same nodes, and the cached one with persistent clusters, for the GPU to
    measure; other launches have no alternative."""
    from kernelwright.fuse import launch_alternatives

    (group,) = groups_of(log_softmax_divergence((8192, 81920), row_sums=True), "reduction")
    spec = group.config[0]
    assert spec.cache and spec.cluster == 8 and spec.full_unroll and not spec.persistent
    other, walking = launch_alternatives(group)
    for alternative in (other, walking):
        assert (alternative.nodes, alternative.inputs, alternative.outputs) == \
            (group.nodes, group.inputs, group.outputs)
    uncached = other.config[0]
    assert not uncached.cache and uncached.cluster == 1 and uncached.threads == 1024
    assert uncached.passes == spec.passes and uncached.levels == spec.levels
    assert walking.config[0] == dataclasses.replace(spec, persistent=True)
    # few rows: a softmax read twice is split statistics (independent blocks share each row)
    (softmax,) = groups_of(CASES["softmax_few_rows"](), "reduction")
    # (50001-long rows take shifted 16-byte chunks, which persistent clusters do not: no persistent form)
    (split,) = launch_alternatives(softmax)
    assert split.config[0].split and not split.config[0].cache
    # split rows with elementwise outputs: the same in one launch
    (planned_split,) = groups_of(CASES["group_norm_3_4mb_rows"](), "reduction")
    assert [g.config[0] for g in launch_alternatives(planned_split)] == \
        [dataclasses.replace(planned_split.config[0], one_launch=True)]
    # rows one block caches (cluster 1), and rows never cached: the planner's launch only
    for graph in (layer_norm((64, 4096), 1, True), one("sum", (64, 4096), dims=(1,))):
        assert all(launch_alternatives(g) == [] for g in groups_of(graph, "reduction"))


def test_rows_one_block_caches_are_not_offered_persistent():
    """Rows one block caches, however few blocks fit an SM: the planner's launch only (persistent blocks
    walking their rows measured no faster on an H200: `launch_alternatives`'s docstring)."""
    from kernelwright.fuse import launch_alternatives

    for graph in (l2_normalize((12288, 16384)), l2_normalize((12288, 4096)), l2_normalize((12288, 16383))):
        (group,) = groups_of(graph, "reduction")
        assert group.config[0].cache and group.config[0].cluster == 1
        assert launch_alternatives(group) == []


def test_large_rows_are_cached_across_a_cluster_sized_to_shared_memory():
    ln = groups_of(CASES["layer_norm_cluster8"](), "reduction")[0].config[0]
    assert ln.cluster == 8 and ln.cache and ln.threads == 512
    # a group of 224 x 224 x 4 bytes x 16 channels (3.2 MB) would take 16 blocks of one per SM: read twice
    # by uncached blocks instead (measured faster): split statistics, two blocks per row (256 rows)
    gn = groups_of(group_norm((32, 128, 224, 224), 8), "reduction")[0].config[0]
    assert not gn.cache and gn.split and gn.cluster == 2 and gn.threads == 512
    # rows whose cache leaves room for 3 blocks per SM: 8 warps each (the registers admit 3)
    ln = groups_of(layer_norm((4096, 65536), 1, True), "reduction")[0].config[0]
    assert ln.cluster == 4 and ln.cache and ln.threads == 256
    # too long for 16 blocks' shared memory: two reads, still spread over a cluster for parallelism
    fallback = groups_of(CASES["layer_norm_too_long"](), "reduction")[0].config[0]
    assert not fallback.cache and fallback.cluster > 1


def test_few_very_long_one_pass_rows_split_over_independent_blocks():
    # a sum to a scalar: every SM busy (about 4 blocks each), each block at least 16 chunks per thread
    spec = groups_of(one("sum", (16384, 10240), dims=None), "reduction")[0].config[0]
    assert spec.split and not spec.cache and spec.threads == 512
    assert 2 * 132 < spec.space.rows * spec.cluster <= 4 * 132
    assert spec.space.row_length // spec.vec // spec.cluster >= 16 * 512
    # a row epilogue is fine (it runs once, in the combining block); Welford and index accumulators too
    for case in ("sum_squares_split", "var_split", "argmax_split", "mean_all_split"):
        assert groups_of(CASES[case](), "reduction")[0].config[0].split, case
    # an elementwise output over rows too long to cache: split too (a second launch writes it)
    softmax = groups_of(one("softmax", (3, 1000003), dim=1), "reduction")[0].config[0]
    assert softmax.split and softmax.passes == 2 and not softmax.cache
    # rows a cluster caches keep the cluster (one read of the row instead of two)
    assert not groups_of(CASES["softmax_long_cluster"](), "reduction")[0].config[0].split
    # enough rows to fill the GPU already: one block (or a cluster) per row
    assert not groups_of(one("sum", (4096, 65536), dims=(1,)), "reduction")[0].config[0].split


def test_odd_mid_rows_get_several_elements_per_thread():
    spec = groups_of(rms_norm((16, 4096, 3071)), "reduction")[0].config[0]
    # 16-byte chunks from each row's first aligned element (SHIFTED kernels), its edges one at a time
    assert spec.vec == 4 and spec.cache and spec.cluster == 1
    assert spec.threads == 256 and 3071 / spec.threads >= 8


def test_layouts_follow_the_innermost_dim():
    assert groups_of(one("sum", (2048, 333), dims=(0,)), "reduction")[0].config[0].layout == "column"
    assert groups_of(one("sum", (2048, 333), dims=(1,)), "reduction")[0].config[0].layout == "row"
    assert groups_of(one("argmax", (8, 513, 40), dim=1), "reduction")[0].config[0].layout == "column"


def test_producer_with_an_outside_user_stays_out():
    x = input_node("x", 0, (8, 64))
    sq = make_node("mul", [x, x])
    graph = Graph((x,), (), (make_node("sum", [sq], dims=(1,)), sq), output_kind="tuple")
    (group,) = groups_of(graph, "reduction")
    assert [n.op for n in group.nodes] == ["sum"]


def test_squeezed_row_value_does_not_broadcast_into_the_row():
    # x - x.mean(1) with keepdim=False broadcasts the means along dim 1, not per row: not a row epilogue
    x = input_node("x", 0, (16, 16))
    graph = Graph((x,), (), (make_node("sub", [x, make_node("mean", [x], dims=(1,))]),))
    (group,) = groups_of(graph, "reduction")
    assert [n.op for n in group.nodes] == ["mean"]


def test_keepdim_row_epilogue_and_row_scalar_epilogue_join():
    x = input_node("x", 0, (16, 16))
    mean = make_node("mean", [x], dims=(1,), keepdim=True)
    scaled = make_node("mul", [mean, const_node(3.0)])
    graph = Graph((x,), (), (make_node("sub", [x, scaled]), scaled), output_kind="tuple")
    (group,) = groups_of(graph, "reduction")
    assert [n.op for n in group.nodes] == ["mean", "mul", "sub"]
    assert group.config[0].levels == ("row", "row", "elem") and len(group.outputs) == 2


def test_out_of_scope_ops_are_left_alone():
    x = input_node("x", 0, (8, 6, 5, 5))
    w, b = param_node("w", (6,)), param_node("b", (6,))
    rm, rv = param_node("rm", (6,)), param_node("rv", (6,))
    eval_bn = make_node("batch_norm", [x, w, b, rm, rv], training=False, momentum=0.1, eps=1e-5,
                        has_weight=True, has_bias=True, has_running=True)
    assert not groups_of(Graph((x,), (w, b, rm, rv), (eval_bn,)), "reduction")
    ints = input_node("i", 0, (8, 16), dtype=torch.int64)
    assert not groups_of(Graph((ints,), (), (make_node("sum", [ints], dims=(1,)),)), "reduction")


def test_matmul_consumer_is_not_absorbed():
    x, w = input_node("x", 0, (32, 64)), input_node("w", 1, (64, 8))
    soft = make_node("softmax", [x], dim=1)
    graph = Graph((x, w), (), (make_node("mm", [soft, w]),))
    (group,) = groups_of(graph, "reduction")
    assert [n.op for n in group.nodes] == ["softmax"]


def test_scan_patterns():
    (rev,) = groups_of(CASES["reverse_cumsum"](), "scan")
    assert [n.op for n in rev.nodes] == ["flip", "cumsum", "flip"] and rev.config[0].reverse
    (exc,) = groups_of(CASES["exclusive_cumsum"](), "scan")
    assert exc.config[0].exclusive and [n.op for n in exc.nodes] == ["cumsum", "sub"]
    (col,) = groups_of(CASES["cumprod_columns"](), "scan")
    assert col.config[0].layout == "columns" and col.config[0].inner == 33


def test_a_scan_computes_its_pointwise_prologue_as_it_reads():
    """cumsum(x * mask): the product is computed in the scan kernel, never written out; a reverse scan
    takes the chain before its flip. A producer that something else reads, or that broadcasts, stays out."""
    (masked,) = groups_of(CASES["masked_cumsum"](), "scan")
    assert [n.op for n in masked.nodes] == ["mul", "cumsum"]
    assert [n.name for n in masked.inputs] == ["x", "mask"]
    (rev,) = groups_of(CASES["masked_reverse_cumsum"](), "scan")
    assert [n.op for n in rev.nodes] == ["mul", "relu", "mul", "flip", "cumsum", "flip"]
    assert rev.config[0].reverse
    (col,) = groups_of(CASES["cumprod_of_exp_columns"](), "scan")
    assert [n.op for n in col.nodes] == ["mul", "exp", "cumprod"] and col.config[0].layout == "columns"
    x, b = input_node("x", 0, (6, 10)), input_node("b", 1, (1, 10))
    shared = make_node("exp", [x])
    graph = Graph((x, b), (), (make_node("cumsum", [shared], dim=1), make_node("neg", [shared])))
    (group,) = groups_of(graph, "scan")
    assert [n.op for n in group.nodes] == ["cumsum"]           # exp is read by neg too: written once
    biased = make_node("cumsum", [make_node("add", [x, b])], dim=1)
    (group,) = groups_of(Graph((x, b), (), (biased,)), "scan")
    assert [n.op for n in group.nodes] == ["cumsum"]           # b broadcasts: not a same-shape operand
    shown = make_node("exp", [x])                              # a graph output itself: written once
    (group,) = groups_of(Graph((x,), (), (make_node("cumsum", [shown], dim=1), shown)), "scan")
    assert [n.op for n in group.nodes] == ["cumsum"]
    product = make_node("mul", [x, x])                         # cumsum(v) - v: v is read twice, exclusive
    exclusive = make_node("sub", [make_node("cumsum", [product], dim=1), product])
    (group,) = groups_of(Graph((x,), (), (exclusive,)), "scan")
    assert [n.op for n in group.nodes] == ["cumsum", "sub"] and group.config[0].exclusive


def test_flip_on_another_dim_is_not_a_reverse_scan():
    x = input_node("x", 0, (6, 10))
    y = make_node("flip", [make_node("cumsum", [make_node("flip", [x], dims=(0,))], dim=1)], dims=(0,))
    (group,) = groups_of(Graph((x,), (), (y,)), "scan")
    assert [n.op for n in group.nodes] == ["cumsum"] and not group.config[0].reverse


def test_few_column_tiles_split_their_statistics_over_independent_blocks():
    # channels-last training BatchNorm over 128 channels: 4 column tiles, which clusters of 8 leave at 32
    # blocks; split, two to four 512-thread blocks per SM, each at least 32 positions per warp
    spec = groups_of(batch_norm_train((32, 128, 128, 128), channel_dim=3), "reduction")[0].config[0]
    assert spec.layout == "column" and spec.split and spec.threads == 512 and not spec.cache
    assert 2 * 132 < 4 * spec.cluster <= 4 * 132
    assert spec.space.row_length // spec.cluster >= 16 * 32
    # enough tiles for the clusters to fill the GPU: no split
    wide = groups_of(batch_norm_train((4, 16, 16, 2048), channel_dim=3), "reduction")[0].config[0]
    assert wide.layout == "column" and not wide.split
    # a short column (a sum over 2048 rows of 333): too little per block to split
    assert not groups_of(one("sum", (2048, 333), dims=(0,)), "reduction")[0].config[0].split
    # two reduction passes (x - mean, then its variance) cannot split: one launch, cluster-combined
    assert not groups_of(CASES["instance_norm"](), "reduction")[0].config[0].split


def test_rows_in_pieces_split_their_statistics_rather_than_cache_at_one_block_per_sm():
    # NCHW training BatchNorm: a channel is 32 pieces of 112 x 112; its 1.6 MB row would be cached by 8
    # blocks of one per SM: split statistics instead (two reads, every SM busy)
    bn = groups_of(batch_norm_train((32, 128, 112, 112)), "reduction")[0].config[0]
    assert bn.split and not bn.cache and bn.layout == "row"
    # channels-last GroupNorm: a group is 16 channels of every pixel
    gn = groups_of(group_norm((64, 126, 126, 128), 8, channel_dim=3), "reduction")[0].config[0]
    assert gn.split and not gn.cache and gn.cluster >= 2
    # a contiguous row of the same size keeps its cached cluster (one read instead of two)
    softmax = groups_of(one("softmax", (4096, 393216), dim=1), "reduction")[0].config[0]
    assert softmax.cache and not softmax.split and softmax.cluster == 8
    # a row that two blocks per SM can cache stays cached
    assert groups_of(CASES["group_norm_1_4mb_rows"](), "reduction")[0].config[0].cache


def test_short_rows_share_a_warp_and_keep_one_row_per_warp_as_an_alternative():
    """Rows under 512 floats take 8 or 16 lanes each (at least 16 elements a lane, at least 8 lanes for a
    shifted row's edges), blocks of 256 threads; longer rows a warp or more. The one-row-per-warp launch
    is offered beside it (verify keeps the faster)."""
    from kernelwright.fuse import launch_alternatives

    def spec_of(length, op="softmax"):
        graph = one(op, (1000, length), **({"dim": 1} if op == "softmax" else {"dims": (1,)}))
        (group,) = groups_of(graph, "reduction")
        return group, group.config[0]

    for length, lanes in ((7, 8), (32, 8), (64, 8), (128, 8), (130, 16), (200, 16), (256, 16), (257, 32),
                          (511, 32), (4096, 32)):
        group, spec = spec_of(length)
        assert spec.lanes == lanes, length
        if lanes < 32:
            assert spec.threads == 256 and spec.warps_per_row == 1 and spec.cluster == 1
            (other,) = launch_alternatives(group)
            assert other.config[0].lanes == 32
    assert spec_of(64, "amin")[1].lanes == 8
