"""Transposed 1D convolution (kernel 5, stride 3, dilation 2), no bias; odd input length."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, dilation):
        super().__init__()
        self.conv_t = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation,
                                         bias=False)

    def forward(self, x):
        return self.conv_t(x)


batch_size = 32
in_channels = 96
out_channels = 48
length = 8191
kernel_size = 5
stride = 3
dilation = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, dilation]
