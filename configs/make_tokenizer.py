#!/usr/bin/env python3
"""make_tokenizer.py: writes configs/demo-tokenizer.json, the BPE tokenizer of the README demo
(configs/demo.json, configs/finetune-demo.json), trained on the shipped corpus. Run by hand, the
output is committed; loom never runs Python. Pinned: tokenizers==0.23.3.

    /work/venv/bin/python configs/make_tokenizer.py

GPT-2 style byte-level BPE (every byte has a token, so any text encodes) with 1024 ids, loom's
chat markers as special tokens (the ids after the merges, in the byte tokenizer's order)."""
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["<|endoftext|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
            "<|tools|>", "<|call|>", "<|think|>"]

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=1024 - len(SPECIALS), show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train([os.path.join(HERE, "data", "corpus.txt")], trainer)
tok.add_special_tokens(SPECIALS)
tok.save(os.path.join(HERE, "demo-tokenizer.json"), pretty=False)
print("configs/demo-tokenizer.json: %d ids" % tok.get_vocab_size())
