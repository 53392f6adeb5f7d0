"""ShuffleNet-style stage: three units of grouped 1x1 conv, channel shuffle, depthwise 3x3 and grouped 1x1
conv, each with BatchNorm in training mode, ReLU and a residual add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def channel_shuffle(x, groups):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, channels, groups, bottleneck):
        super().__init__()
        self.groups = groups
        self.reduce = nn.Conv2d(channels, bottleneck, 1, groups=groups, bias=False)
        self.bn1 = nn.BatchNorm2d(bottleneck)
        self.depthwise = nn.Conv2d(bottleneck, bottleneck, 3, padding=1, groups=bottleneck, bias=False)
        self.bn2 = nn.BatchNorm2d(bottleneck)
        self.expand = nn.Conv2d(bottleneck, channels, 1, groups=groups, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = F.relu(self.bn1(self.reduce(x)))
        out = channel_shuffle(out, self.groups)
        out = self.bn2(self.depthwise(out))
        out = self.bn3(self.expand(out))
        return F.relu(x + out)


class Model(nn.Module):
    def __init__(self, channels, groups, bottleneck, units):
        super().__init__()
        self.units = nn.Sequential(*(ShuffleUnit(channels, groups, bottleneck) for _ in range(units)))

    def forward(self, x):
        return self.units(x)


batch_size = 16
channels = 240
groups = 3
bottleneck = 60
units = 3
image_size = 56


def get_inputs():
    return [torch.randn(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, groups, bottleneck, units]
