"""Cross-entropy loss over 4093 classes with int64 class targets (scalar output)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.cross_entropy(predictions, targets)


batch_size = 32768
num_classes = 4093


def get_inputs():
    return [torch.randn(batch_size, num_classes) * 3.0, torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
