"""A forward pre-hook for every module (torch.nn.modules.module's
register_module_forward_pre_hook) that changes nothing: the trace is the in-process
tracer's, and evmbpf says, once, that such hooks run after it sees a call."""
import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook


def everywhere(module, args):
    return None


def build():
    register_module_forward_pre_hook(everywhere)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def run(model):
    for _ in range(3):
        model(torch.ones(2, 4))
