"""HF transformers LlamaForCausalLM from a tiny config (no download): one forward, then
generate() with a DynamicCache (KV cache). Runs where transformers is installed (the sid
chroot). The cache goes through the decoder layers as the `past_key_values` keyword and
comes back in the CausalLMOutputWithPast (a ModelOutput, an OrderedDict subclass)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build():
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2)
    return LlamaForCausalLM(config)


def run(model):
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    model(input_ids=ids)
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                   do_sample=False, min_new_tokens=3)
