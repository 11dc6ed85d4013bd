"""smol_shapes.py: the randomly initialised LlamaForCausalLM with SmolLM2-135M's shapes (d 576,
30 layers, 9/3 heads, d_ff 1536, vocab 49152, tied embeddings, rope theta 1e5) that the Python
references of bench/ (hf_generate.py, peft_lora.py) run, so both time the same model."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def smol_model(threads):
    """The model (seed 0) with torch on `threads` threads."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      rope_theta=100000.0, tie_word_embeddings=True, rms_norm_eps=1e-5)
    return LlamaForCausalLM(cfg)
