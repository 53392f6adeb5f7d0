import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_init_inputs():
    return []
