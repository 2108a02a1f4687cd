"""One module called with a tensor of each dtype torch 1.7 and later can make on a CPU
(their names as torch prints them are what a trace's "dtype" says)."""
import torch

DTYPES = ["float32", "float64", "float16", "bfloat16", "uint8", "int8", "int16", "int32",
          "int64", "bool", "complex64", "complex128"]


class Echo(torch.nn.Module):
    def forward(self, x):
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.echo = Echo()

    def forward(self, xs):
        return [self.echo(x) for x in xs]


def build():
    return Model()


def run(model):
    model([torch.zeros(2, 3, dtype=getattr(torch, name)) for name in DTYPES])
