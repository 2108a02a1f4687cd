"""A 32-layer HF Llama of tiny width (no download), paused deep inside its first
forward: in the last decoder layer's MLP activation, by a forward pre-hook that waits
there (MIDFORWARD_FLAG is created when it starts waiting; it goes on when
MIDFORWARD_RESUME exists, MIDFORWARD_PAUSE seconds at most). For timing evmbpf dump on
a model of a real one's depth. Runs where transformers is installed (the sid chroot)."""
import os
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build():
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=32, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2)
    model = LlamaForCausalLM(config)

    def wait(module, args):
        if getattr(module, "waited", False):
            return
        module.waited = True
        flag, resume = os.environ.get("MIDFORWARD_FLAG"), os.environ.get("MIDFORWARD_RESUME")
        if flag:
            open(flag, "w").close()
        deadline = time.monotonic() + float(os.environ.get("MIDFORWARD_PAUSE", "3"))
        while resume and not os.access(resume, os.F_OK) and time.monotonic() < deadline:
            time.sleep(0.01)

    model.model.layers[31].mlp.act_fn.register_forward_pre_hook(wait)
    return model


def run(model):
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    model(input_ids=ids)
