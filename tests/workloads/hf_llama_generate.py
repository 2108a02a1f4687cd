"""HF transformers LlamaForCausalLM from a tiny config (no download): greedy generate()
of 4 new tokens for a batch of two prompts, the shorter one left-padded, with their
attention mask. transformers 5 runs every decoding step after the prefill through a
bound __call__ (`model_forward = self.__call__`)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build():
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2)
    return LlamaForCausalLM(config)


def run(model):
    ids = torch.tensor([[1, 5, 9, 13, 17], [0, 0, 1, 7, 11]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    model.generate(ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4,
                   do_sample=False)
