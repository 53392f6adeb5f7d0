"""SqueezeNet-style network on one image: six fire modules between max pools, 1x1 conv classifier, mean pool.

A fire module squeezes with a 1x1 conv, expands with a 1x1 and a 3x3 conv and concatenates the two.
Launch-bound: 50 ATen ops a forward (20 convolutions, 20 ReLUs, 6 concatenations, 3 pools, 1 mean).
"""
import torch
import torch.nn as nn


class Fire(nn.Module):
    def __init__(self, in_channels, squeeze_channels, expand_channels):
        super().__init__()
        self.squeeze = nn.Conv2d(in_channels, squeeze_channels, 1)
        self.expand1x1 = nn.Conv2d(squeeze_channels, expand_channels, 1)
        self.expand3x3 = nn.Conv2d(squeeze_channels, expand_channels, 3, padding=1)

    def forward(self, x):
        s = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.expand1x1(s)), torch.relu(self.expand3x3(s))], dim=1)


class Model(nn.Module):
    def __init__(self, in_channels, stem_channels, squeeze_channels, num_classes):
        super().__init__()
        s = squeeze_channels
        self.stem = nn.Conv2d(in_channels, stem_channels, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.stage1 = nn.Sequential(Fire(stem_channels, s, 4 * s), Fire(8 * s, s, 4 * s))
        self.stage2 = nn.Sequential(Fire(8 * s, 2 * s, 8 * s), Fire(16 * s, 2 * s, 8 * s))
        self.stage3 = nn.Sequential(Fire(16 * s, 3 * s, 12 * s), Fire(24 * s, 3 * s, 12 * s))
        self.classifier = nn.Conv2d(24 * s, num_classes, 1)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        x = self.pool(self.stage1(x))
        x = self.pool(self.stage2(x))
        x = torch.relu(self.classifier(self.stage3(x)))
        return x.mean(dim=(2, 3))


batch_size = 1
in_channels = 3
image_size = 96
stem_channels = 64
squeeze_channels = 16
num_classes = 100


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, stem_channels, squeeze_channels, num_classes]
