"""Forward pre-hooks of the process's own, registered before the in-process tracer's
(build() registers them; the tracer's come after): one that does nothing with what it is
given (as weight_norm's or pruning's), on `act`, and one that replaces its module's args,
on `head` (a batch dimension added: the in-process tracer writes what the hook returned).
A module call is seen before its pre-hooks run; evmbpf says so, once."""
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.act(self.first(x)))


def unchanged(module, args):
    return None


def batched(module, args):
    return (args[0].unsqueeze(0),)


def build():
    model = Model()
    model.act.register_forward_pre_hook(unchanged)
    model.head.register_forward_pre_hook(batched)
    return model


def run(model):
    x = torch.ones(2, 4)
    for _ in range(3):
        model(x)
