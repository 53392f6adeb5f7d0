"""Knowledge-distillation loss: KL divergence between temperature-softened student and teacher logits.

Full size: inputs 5.00 GiB, outputs 4 B, parameters 0 B.
Ideal on an H100: 1.79 ms (5.00 GiB moved once at 3.0 TB/s).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, student_logits, teacher_logits):
        t = self.temperature
        student = F.log_softmax(student_logits / t, dim=-1)
        teacher = F.log_softmax(teacher_logits / t, dim=-1)
        return F.kl_div(student, teacher, reduction="batchmean", log_target=True) * (t * t)


batch_size = 8192
vocab_size = 81920
temperature = 2.0


def get_inputs():
    return [torch.randn(batch_size, vocab_size) * 4.0, torch.randn(batch_size, vocab_size) * 4.0]


def get_init_inputs():
    return [temperature]
