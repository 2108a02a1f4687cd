"""HF transformers GPT2LMHeadModel from a tiny config (no download): greedy generate()
of 4 new tokens for a batch of two prompts, the shorter one left-padded, with their
attention mask (decoding steps through a bound __call__, as in hf_llama_generate.py)."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build():
    config = GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return GPT2LMHeadModel(config)


def run(model):
    ids = torch.tensor([[1, 5, 9, 13], [0, 1, 7, 11]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    model.generate(ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4,
                   do_sample=False)
