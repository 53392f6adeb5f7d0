"""ConvTranspose3d (stride 2), BatchNorm3d (training: batch statistics), ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                         output_padding=output_padding)
        self.bn = nn.BatchNorm3d(out_channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv_t(x)))


def get_inputs():
    return [torch.randn(16, 32, 16, 32, 32)]


def get_init_inputs():
    return [32, 64, 3, 2, 1, 1]
