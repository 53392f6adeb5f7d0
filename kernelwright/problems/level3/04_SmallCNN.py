"""Small CNN classifier: (conv3x3-ReLU-maxpool2) x 2, flatten, linear."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, channels_1, channels_2, image_size, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels_1, 3, padding=1)
        self.conv2 = nn.Conv2d(channels_1, channels_2, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        feature_size = image_size // 4
        self.fc = nn.Linear(channels_2 * feature_size * feature_size, num_classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


batch_size = 64
in_channels = 3
channels_1 = 64
channels_2 = 128
image_size = 128
num_classes = 100


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, channels_1, channels_2, image_size, num_classes]
