"""KV cache layers that change under the reader: a cache whose layers are of two classes
(their attributes in different orders, so `keys` and `values` sit at different places in
each class's shared keys), grown step by step (the old tensors freed, new ones often at
the same addresses), a layer whose __dict__ was made, a layer whose keys were deleted, a
layer replaced by one of the other class, keys reassigned in place to tensors of other
sizes and to something that is not a tensor, keys and values made in either order, one
tensor as both, a value that is not a tensor. The reference and evmbpf must describe each
the same (3.13+: the layers' inline values are read in one go per layer)."""
import torch
from torch import nn


class Cache:
    def __init__(self):
        self.layers = []

    def get_seq_length(self, layer_idx=0):
        if layer_idx >= len(self.layers):
            return 0
        return self.layers[layer_idx].get_seq_length()


class FullLayer:
    def __init__(self):
        self.keys = None
        self.values = None
        self.is_initialized = False

    def update(self, k, v):
        if not self.is_initialized:
            self.keys, self.values = k, v
            self.is_initialized = True
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)

    def get_seq_length(self):
        keys = getattr(self, "keys", None)
        if not isinstance(keys, torch.Tensor) or keys.numel() == 0:
            return 0
        return keys.shape[-2]


class SlidingLayer(FullLayer):
    def __init__(self):  # pylint: disable=super-init-not-called
        self.window = 3
        self.is_initialized = False
        self.device = "cpu"
        self.values = None
        self.keys = None

    def update(self, k, v):
        super().update(k, v)
        self.keys = self.keys[..., -self.window:, :]
        self.values = self.values[..., -self.window:, :]


class MixedCache(Cache):
    def __init__(self, n):
        super().__init__()
        self.layers = [FullLayer() if i % 2 == 0 else SlidingLayer() for i in range(n)]


class Attn(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx
        self.proj = nn.Linear(8, 8)

    def forward(self, x, past_key_values=None):
        k = self.proj(x).view(1, 2, -1, 4)
        if past_key_values is not None and self.idx < len(past_key_values.layers):
            past_key_values.layers[self.idx].update(k, k * 2)
        return x + 1


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Attn(i) for i in range(4)])
        self.head = nn.Identity()

    def forward(self, x, past_key_values=None):
        for layer in self.layers:
            x = layer(x, past_key_values=past_key_values)
        return self.head(x)


def build():
    return Model()


def run(model):
    x = torch.ones(1, 2, 8)
    cache = MixedCache(4)
    for _ in range(4):
        model(x, past_key_values=cache)
    vars(cache.layers[1])["note"] = "a dict made"  # this layer's attributes move to a dict
    model(x, past_key_values=cache)
    del cache.layers[2].keys
    model.head(cache)
    cache.layers[0] = SlidingLayer()
    model.head(cache)
    cache.layers[0].update(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    model.head(cache)
    for n in (3, 5, 2, 5):
        cache.layers[3].keys = torch.zeros(1, 2, n, 4)
        model.head(cache)
    cache.layers[3].keys = "not a tensor"
    model.head(cache)
    # a layer's value made just before its key (side by side, the other order), the same
    # tensor as key and value, a value that is not a tensor beside a tensor key: one read
    # may give both heads, and each is checked as a tensor on its own
    v = torch.zeros(1, 2, 3, 4)
    k = torch.zeros(1, 2, 5, 4)
    cache.layers[3].keys, cache.layers[3].values = k, v
    model.head(cache)
    cache.layers[3].values = k
    model.head(cache)
    cache.layers[3].values = (1, 2)
    model.head(cache)
    model(x, past_key_values=MixedCache(0))
