"""ConvTranspose3d (stride 2, doubles D, H and W; 64 -> 8 channels), GroupNorm (2 groups), then GELU.

Full size: inputs 4.50 GiB, outputs 4.50 GiB, parameters 54.09 KiB.
Ideal on an H100: 7.80 ms (0.52 TFLOP at FP32's 66.9 TFLOP/s;
3.16 ms at 3xTF32's 165 TFLOP/s; 9.00 GiB moved once at 3.0 TB/s: 3.22 ms).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, num_groups):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                         padding=padding, output_padding=output_padding)
        self.norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        return F.gelu(self.norm(self.conv_t(x)))


batch_size = 64
in_channels = 64
out_channels = 8
depth = 32
height = 96
width = 96
kernel_size = 3
stride = 2
padding = 1
output_padding = 1
num_groups = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, num_groups]
