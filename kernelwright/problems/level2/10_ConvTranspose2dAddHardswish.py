"""ConvTranspose2d (stride 2, doubles the resolution), add a second input tensor, then Hardswish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding
        )

    def forward(self, x, add_input):
        return F.hardswish(self.conv_t(x) + add_input)


batch_size = 16
in_channels = 128
out_channels = 64
height = 128
width = 128
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    out_h = (height - 1) * stride - 2 * padding + kernel_size + output_padding
    out_w = (width - 1) * stride - 2 * padding + kernel_size + output_padding
    return [torch.randn(batch_size, in_channels, height, width), torch.randn(batch_size, out_channels, out_h, out_w)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
