"""Hugging Face ``transformers`` models from configs, random weights: GPT-2, BERT, Llama.

Built only when ``transformers`` is installed; nothing is downloaded. Dropout
is off so that every backend computes the same function.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from benchmarks.models import Built, ModelSpec, random_tokens

# size -> (layers, hidden, heads, seq, batch, vocab)
SHAPES = {
    "tiny": (1, 32, 2, 16, 2, 128),
    "small": (2, 128, 4, 64, 2, 1024),
    "large": (4, 768, 12, 512, 16, 32000),
}


class LogitsOnly(nn.Module):
    """Calls a ``transformers`` model on token ids and returns only the logits tensor."""

    def __init__(self, model: nn.Module, **call_kwargs: Any):
        super().__init__()
        self.model = model
        self.call_kwargs = call_kwargs

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, **self.call_kwargs).logits


def _quiet_transformers() -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def build_gpt2(size: str) -> Built:
    tf = _quiet_transformers()
    layers, hidden, heads, seq, batch, vocab = SHAPES[size]
    config = tf.GPT2Config(
        n_layer=layers, n_embd=hidden, n_head=heads, n_positions=seq, vocab_size=vocab,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = LogitsOnly(tf.GPT2LMHeadModel(config), use_cache=False)
    return Built(model, (random_tokens(vocab, (batch, seq)),))


def build_bert(size: str) -> Built:
    tf = _quiet_transformers()
    layers, hidden, heads, seq, batch, vocab = SHAPES[size]
    config = tf.BertConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        intermediate_size=4 * hidden, max_position_embeddings=seq, vocab_size=vocab,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = LogitsOnly(tf.BertForMaskedLM(config))
    return Built(model, (random_tokens(vocab, (batch, seq)),))


def build_llama(size: str) -> Built:
    tf = _quiet_transformers()
    layers, hidden, heads, seq, batch, vocab = SHAPES[size]
    config = tf.LlamaConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2), intermediate_size=hidden * 8 // 3,
        max_position_embeddings=seq, vocab_size=vocab, bos_token_id=0, eos_token_id=0,
        pad_token_id=0,
    )  # fmt: skip
    model = LogitsOnly(tf.LlamaForCausalLM(config), use_cache=False)
    return Built(model, (random_tokens(vocab, (batch, seq)),))


SPECS = [
    ModelSpec("hf_gpt2", "transformers GPT-2 (config, random weights)", build_gpt2, ("transformers",)),
    ModelSpec("hf_bert", "transformers BERT masked LM (config, random weights)", build_bert, ("transformers",)),
    ModelSpec("hf_llama", "transformers Llama causal LM (config, random weights)", build_llama, ("transformers",)),
]  # fmt: skip
