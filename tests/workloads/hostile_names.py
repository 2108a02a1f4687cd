"""Module names and an exception message that are terminal commands: a title change
(OSC 0), a screen clear, a C1 control, a carriage return that would draw a fake line."""
import torch
from torch import nn

EVIL = "evil\x1b]0;pwned\x07\x1b[2J\u009b31m\rFAKE"


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(EVIL, nn.Linear(2, 2))

    def forward(self, x):
        x = getattr(self, EVIL)(x)
        raise RuntimeError("boom " + EVIL)


def build():
    return Root()


def run(model):
    model(torch.zeros(1, 2))
