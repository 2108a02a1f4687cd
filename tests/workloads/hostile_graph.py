"""A model whose module graph is built to hurt a reader of it (argv[1]):
- shared: 3,000 modules whose _modules is one and the same dict of all 3,000 (named_modules
  looks at 9 M entries);
- deep: 63 levels of modules with 250-character names, 20,000 leaves at the bottom (each
  path some 16 kB: 300 MB of names).
Then one forward of the root, which evmbpf's first module call reads the tree at."""
import sys

import torch
from torch import nn

kind = sys.argv[1]


class Root(nn.Module):
    def forward(self, x):
        return x


root = Root()
if kind == "shared":
    mods = [nn.Module() for _ in range(3000)]
    shared = {f"m{i}": m for i, m in enumerate(mods)}
    for m in mods + [root]:
        m._modules = shared
else:
    at = root
    for level in range(62):
        child = nn.Module()
        at.add_module(f"l{level:02d}" + "x" * 247, child)
        at = child
    for i in range(20000):
        at.add_module(f"leaf{i:05d}" + "y" * 241, nn.Module())
root(torch.zeros(1))
