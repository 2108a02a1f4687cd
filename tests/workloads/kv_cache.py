"""KV caches without transformers: classes shaped like transformers' caches (a base class
named Cache; transformers 5's `layers[i].keys/.values` and 4's `key_cache`/`value_cache`),
passed to modules as keyword and positional arguments, returned inside a dict and a
tuple, grown as generation grows them. The reference describes any object with
get_seq_length() as {type, layers, shape, dtype, device, bytes, seq}; evmbpf reads the
same attributes from the instance dicts (every CPython layout: tp_dictoffset dicts, 3.11's
values pointer, 3.12's slot, 3.13+ inline values), including an instance whose __dict__
was made (a materialized dict) and a cache with no layers yet."""
import torch
from torch import nn


class Cache:
    def __init__(self):
        self.layers = []

    def get_seq_length(self, layer_idx=0):
        if layer_idx >= len(self.layers):
            return 0
        return self.layers[layer_idx].get_seq_length()


class DynamicLayer:
    def __init__(self):
        self.is_initialized = False

    def update(self, k, v):
        if not self.is_initialized:
            self.keys, self.values = k, v
            self.is_initialized = True
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)

    def get_seq_length(self):
        if not self.is_initialized or self.keys.numel() == 0:
            return 0
        return self.keys.shape[-2]


class DynamicCache(Cache):
    def __init__(self, n):
        super().__init__()
        self.layers = [DynamicLayer() for _ in range(n)]


class LegacyCache(Cache):
    """transformers 4: key_cache / value_cache lists, no layers."""

    def __init__(self):
        self.key_cache, self.value_cache = [], []

    def get_seq_length(self, layer_idx=0):
        if len(self.key_cache) <= layer_idx or self.key_cache[layer_idx].numel() == 0:
            return 0
        return self.key_cache[layer_idx].shape[-2]


class Attn(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx
        self.proj = nn.Linear(8, 8)

    def forward(self, x, past_key_values=None):
        k = self.proj(x).view(1, 2, -1, 4)
        if isinstance(past_key_values, LegacyCache):
            if len(past_key_values.key_cache) <= self.idx:
                past_key_values.key_cache.append(k)
                past_key_values.value_cache.append(k * 2)
            else:
                c = past_key_values.key_cache
                c[self.idx] = torch.cat([c[self.idx], k], dim=-2)
                v = past_key_values.value_cache
                v[self.idx] = torch.cat([v[self.idx], k * 2], dim=-2)
        elif past_key_values is not None and self.idx < len(past_key_values.layers):
            past_key_values.layers[self.idx].update(k, k * 2)
        return x + 1


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Attn(i) for i in range(3)])
        self.head = nn.Identity()

    def forward(self, x, past_key_values=None):
        for layer in self.layers:
            x = layer(x, past_key_values=past_key_values)
        out = self.head(x)
        return {"logits": out, "past_key_values": past_key_values}, (past_key_values, 3)


def build():
    return Model()


def run(model):
    x = torch.ones(1, 2, 8)
    empty = DynamicCache(0)
    model(x, past_key_values=empty)
    cache = DynamicCache(3)
    for _ in range(3):
        model(x, past_key_values=cache)
    materialized = DynamicCache(3)
    materialized.__dict__["note"] = "a dict made"  # the attributes move to a real dict
    model(x, past_key_values=materialized)
    legacy = LegacyCache()
    for _ in range(2):
        model(x, past_key_values=legacy)
    half = DynamicCache(3)
    half.layers[0].update(torch.zeros(1, 2, 5, 4, dtype=torch.float16),
                          torch.zeros(1, 2, 5, 4, dtype=torch.float16))
    model.head(half)
