"""BatchNorm in training mode (problem batchnorm_train.py) that normalizes correctly but never updates the
running statistics. Expected: mismatch (the buffers after forward differ)."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x):
        return F.batch_norm(x, None, None, self.bn.weight, self.bn.bias, training=True, eps=self.bn.eps)
