"""HF transformers GPT2LMHeadModel from a tiny config (no download): a forward, then
generate() with its KV cache (a second architecture beside hf_llama.py)."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build():
    config = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return GPT2LMHeadModel(config)


def run(model):
    ids = torch.tensor([[1, 5, 9, 13]])
    model(input_ids=ids)
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                   do_sample=False, min_new_tokens=3)
