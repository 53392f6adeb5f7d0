"""Tiny convolutional autoencoder: two stride-2 convs down, two stride-2 transposed convs up, sigmoid output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, channels_1, channels_2):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(in_channels, channels_1, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels_1, channels_2, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(channels_2, channels_1, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(channels_1, in_channels, 4, stride=2, padding=1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


batch_size = 32
in_channels = 3
channels_1 = 64
channels_2 = 128
image_size = 256


def get_inputs():
    return [torch.rand(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, channels_1, channels_2]
