"""MobileNetV2-style network on one image: six inverted residual blocks, BatchNorm in training mode.

Each block: 1x1 expand, depthwise 3x3, 1x1 project, each with BatchNorm, ReLU6 after the first two, a residual
add where the shape allows. Launch-bound: about 76 ATen ops a forward (19 convolutions, 19
BatchNorms and their counter increments, 13 clamps), the largest 64K outputs.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class InvertedResidual(nn.Module):
    def __init__(self, in_channels, out_channels, stride, expand_ratio):
        super().__init__()
        hidden = in_channels * expand_ratio
        self.use_residual = stride == 1 and in_channels == out_channels
        # With a bias: a block's input is a BatchNorm output (zero batch mean), so without one bn1's running
        # mean would be rounding noise (~1e-9), on which no two summation orders agree.
        self.expand = nn.Conv2d(in_channels, hidden, 1)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        out = F.relu6(self.bn1(self.expand(x)))
        out = F.relu6(self.bn2(self.depthwise(out)))
        out = self.bn3(self.project(out))
        return x + out if self.use_residual else out


class Model(nn.Module):
    def __init__(self, in_channels, channels_1, channels_2, channels_3, expand_ratio, num_classes):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, channels_1, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(channels_1),
            nn.ReLU6(),
        )
        # (in, out, stride): each stride-2 block halves the image, the stride-1 ones add a residual.
        plan = [
            (channels_1, channels_1, 1),
            (channels_1, channels_2, 2),
            (channels_2, channels_2, 1),
            (channels_2, channels_3, 2),
            (channels_3, channels_3, 1),
            (channels_3, channels_3, 1),
        ]
        self.blocks = nn.Sequential(*(InvertedResidual(i, o, s, expand_ratio) for i, o, s in plan))
        self.classifier = nn.Linear(channels_3, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.classifier(x.mean(dim=(2, 3)))


batch_size = 1
in_channels = 3
image_size = 64
channels_1 = 16
channels_2 = 24
channels_3 = 32
expand_ratio = 4
num_classes = 100


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, channels_1, channels_2, channels_3, expand_ratio, num_classes]
