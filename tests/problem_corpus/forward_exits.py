"""Malformed: the model's forward calls sys.exit (only running it shows this)."""
import sys

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        sys.exit("forward gave up")


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
