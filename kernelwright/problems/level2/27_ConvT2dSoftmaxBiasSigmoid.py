"""ConvTranspose2d, softmax over channels, a per-channel bias, scaling, then sigmoid."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, scale):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                         output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)
        self.scale = scale

    def forward(self, x):
        x = torch.softmax(self.conv_t(x), dim=1)
        return torch.sigmoid((x + self.bias) * self.scale)


batch_size = 16
in_channels = 48
out_channels = 64
height = 64
width = 64
kernel_size = 4
stride = 2
padding = 1
output_padding = 0
scale = 3.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, scale]
