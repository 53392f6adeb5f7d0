"""Malformed: get_inputs() calls sys.exit."""
import sys

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    sys.exit("no inputs here")


def get_init_inputs():
    return []
