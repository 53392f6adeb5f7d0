"""Hack: uses kernelwright's own loader to get the reference Model of a bundled problem.
Expected: rejected (a candidate may not import kernelwright)."""
import importlib

import torch.nn as nn

problem_module = importlib.import_module("kernel" + "wright.problem")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return problem_module.load_problem("level1/04_GELUTanh").build_model()(x)
