"""ConvTranspose2d (stride 2), min over channels, sum over the height, GELU, plus a learned bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                         output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(1, 1, 1, 1) * 0.02)

    def forward(self, x):
        x = self.conv_t(x)
        x = torch.min(x, dim=1, keepdim=True)[0]
        x = torch.sum(x, dim=2, keepdim=True)
        return F.gelu(x) + self.bias


batch_size = 32
in_channels = 64
out_channels = 32
height = 64
width = 64
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
