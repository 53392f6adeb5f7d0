"""1-D convolutions in cuDNN: NCL (eager's layout) against the same convolution as a 2-D one of height 1 on
channels-last data (what the layout pass emits, `ir/ops.py`), with ATen's NCL -> NLC copy for scale; each
timed alone (CUDA events, cold L2), the two results compared.

    python bench/kernels/conv1d_layouts.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _timing import l2_flush, time_ms  # noqa: E402

# (batch, in channels, length, out channels, taps, stride, padding, dilation, transposed)
CASES = [
    (16, 256, 16381, 256, 5, 1, 2, 1, False),
    (32, 128, 8192, 256, 5, 1, 2, 1, False),
    (32, 96, 8191, 48, 5, 3, 0, 2, True),
    (64, 64, 65536, 64, 3, 1, 1, 1, False),
    (8, 512, 4099, 1024, 7, 2, 3, 1, False),
]


def conv(x: torch.Tensor, w: torch.Tensor, case: tuple, as_2d: bool) -> torch.Tensor:
    *_, stride, padding, dilation, transposed = case
    if not as_2d:
        if transposed:
            return F.conv_transpose1d(x, w, stride=stride, padding=padding, dilation=dilation)
        return F.conv1d(x, w, stride=stride, padding=padding, dilation=dilation)
    if transposed:
        return F.conv_transpose2d(x, w, stride=(1, stride), padding=(0, padding), dilation=(1, dilation))
    return F.conv2d(x, w, stride=(1, stride), padding=(0, padding), dilation=(1, dilation))


def main() -> int:
    flush = l2_flush()
    for case in CASES:
        n, c, length, o, taps = case[:5]
        x = torch.randn(n, c, length, device="cuda")
        w = torch.randn((c, o, taps) if case[-1] else (o, c, taps), device="cuda")
        x4 = x.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        w4 = w.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        ref, out = conv(x, w, case, False), conv(x4, w4, case, True).squeeze(2)
        diff = float((out - ref).abs().max() / ref.abs().max())
        ncl = time_ms(lambda x=x, w=w, case=case: conv(x, w, case, False), flush)
        nlc = time_ms(lambda x4=x4, w4=w4, case=case: conv(x4, w4, case, True), flush)
        copy = time_ms(lambda x=x: x.transpose(1, 2).contiguous(), flush)
        print(f"{case}: NCL {ncl:.3f} ms, NLC as 2-D {nlc:.3f} ms, ATen's NCL->NLC copy {copy:.3f} ms, "
              f"max difference {diff:.1e} of the largest output")
    return 0


if __name__ == "__main__":
    sys.exit(main())
