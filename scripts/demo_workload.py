"""The demo: a small transformer that runs three forwards, then fails in the fourth,
the way an evaluation job dies. Plain PyTorch: nothing in it knows about evmbpf."""
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return self.out(weights @ v)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm(x), mask=None)
        if x.shape[0] > 4:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self, vocab=100, d=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Model().eval()
    with torch.no_grad():
        for batch in (1, 2, 4, 8):
            model(torch.randint(0, 100, (batch, 16)))
