"""Hugging Face ``transformers`` models from configs with random weights.

Decoder-only LLMs (GPT-2; Llama, Mistral, Qwen2 and Gemma: RMSNorm, rotary
embeddings, grouped-query attention), encoders (BERT, RoBERTa, DistilBERT),
an encoder-decoder (T5), a vision transformer (ViT) and a dual encoder
(CLIP). Built only when ``transformers`` is installed; nothing is downloaded.
Dropout is off so that every backend computes the same function.

``resized_inputs`` change the batch and the sequence length (images: the batch).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import torch
from torch import nn

from benchmarks.models import Built, ModelSpec, random_inputs, random_tokens


class Shape(NamedTuple):
    layers: int
    hidden: int
    heads: int
    seq: int
    batch: int
    vocab: int
    image: int  # image side (vision models)
    patch: int


SHAPES = {
    "tiny": Shape(layers=2, hidden=64, heads=4, seq=16, batch=2, vocab=256, image=32, patch=8),
    "small": Shape(layers=2, hidden=128, heads=4, seq=64, batch=2, vocab=1024, image=64, patch=8),
    "large": Shape(layers=4, hidden=768, heads=12, seq=512, batch=16, vocab=32000, image=224, patch=16),
}  # fmt: skip


class LogitsOnly(nn.Module):
    """Calls a ``transformers`` model with its inputs by keyword and returns one output tensor.

    ``input_names`` name the positional inputs of ``forward`` (``input_ids`` by default).
    """

    def __init__(
        self,
        model: nn.Module,
        input_names: tuple[str, ...] = ("input_ids",),
        output: str = "logits",
        **call_kwargs: Any,
    ):
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.output = output
        self.call_kwargs = call_kwargs

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        named = dict(zip(self.input_names, inputs, strict=True))
        return getattr(self.model(**named, **self.call_kwargs), self.output)


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing may be downloaded
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _tokens(model: nn.Module, s: Shape, **call_kwargs: Any) -> Built:
    """A language model on token ids: (batch, seq), then (batch + 1, seq / 2 + 1)."""
    resized = (s.batch + 1, s.seq // 2 + 1)
    return Built(
        LogitsOnly(model, **call_kwargs),
        (random_tokens(s.vocab, (s.batch, s.seq)),),
        (random_tokens(s.vocab, resized),),
    )


def _images(model: nn.Module, s: Shape, **call_kwargs: Any) -> Built:
    """A vision model on (batch, 3, image, image) pixels, then one image more."""
    return Built(
        LogitsOnly(model, ("pixel_values",), **call_kwargs),
        random_inputs((s.batch, 3, s.image, s.image)),
        random_inputs((s.batch + 1, 3, s.image, s.image)),
    )


def _decoder_config(s: Shape) -> dict[str, Any]:
    """What the Llama-family configs share: GQA (half as many key/value heads), no dropout."""
    return dict(
        num_hidden_layers=s.layers, hidden_size=s.hidden, num_attention_heads=s.heads,
        num_key_value_heads=max(1, s.heads // 2), intermediate_size=s.hidden * 8 // 3,
        max_position_embeddings=s.seq, vocab_size=s.vocab, attention_dropout=0.0,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip


def build_gpt2(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.GPT2Config(
        n_layer=s.layers, n_embd=s.hidden, n_head=s.heads, n_positions=s.seq, vocab_size=s.vocab,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return _tokens(tf.GPT2LMHeadModel(config), s, use_cache=False)


def build_bert(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.BertConfig(
        num_hidden_layers=s.layers, hidden_size=s.hidden, num_attention_heads=s.heads,
        intermediate_size=4 * s.hidden, max_position_embeddings=s.seq, vocab_size=s.vocab,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _tokens(tf.BertForMaskedLM(config), s)


def build_roberta(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.RobertaConfig(
        num_hidden_layers=s.layers, hidden_size=s.hidden, num_attention_heads=s.heads,
        intermediate_size=4 * s.hidden, max_position_embeddings=s.seq + 2, vocab_size=s.vocab,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=1,
    )  # fmt: skip
    return _tokens(tf.RobertaForMaskedLM(config), s)


def build_distilbert(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.DistilBertConfig(
        n_layers=s.layers, dim=s.hidden, n_heads=s.heads, hidden_dim=4 * s.hidden,
        max_position_embeddings=s.seq, vocab_size=s.vocab, dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return _tokens(tf.DistilBertForMaskedLM(config), s)


def build_llama(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    return _tokens(tf.LlamaForCausalLM(tf.LlamaConfig(**_decoder_config(s))), s, use_cache=False)


def build_mistral(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.MistralConfig(**_decoder_config(s), sliding_window=s.seq // 2)
    return _tokens(tf.MistralForCausalLM(config), s, use_cache=False)


def build_qwen2(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    return _tokens(tf.Qwen2ForCausalLM(tf.Qwen2Config(**_decoder_config(s))), s, use_cache=False)


def build_gemma(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.GemmaConfig(**_decoder_config(s), head_dim=s.hidden // s.heads)
    return _tokens(tf.GemmaForCausalLM(config), s, use_cache=False)


def build_t5(size: str) -> Built:
    """T5 with relative position buckets; encoder and decoder both get token ids."""
    tf, s = _transformers(), SHAPES[size]
    config = tf.T5Config(
        vocab_size=s.vocab, d_model=s.hidden, d_kv=s.hidden // s.heads, d_ff=2 * s.hidden,
        num_layers=s.layers, num_heads=s.heads, relative_attention_num_buckets=8,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    model = LogitsOnly(
        tf.T5ForConditionalGeneration(config), ("input_ids", "decoder_input_ids"), use_cache=False
    )

    def tokens(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
        return (
            random_tokens(s.vocab, (batch, seq)),
            random_tokens(s.vocab, (batch, seq // 2), seed=2),
        )

    return Built(model, tokens(s.batch, s.seq), tokens(s.batch + 1, s.seq // 2 + 2))


def build_vit(size: str) -> Built:
    tf, s = _transformers(), SHAPES[size]
    config = tf.ViTConfig(
        image_size=s.image, patch_size=s.patch, hidden_size=s.hidden, num_hidden_layers=s.layers,
        num_attention_heads=s.heads, intermediate_size=4 * s.hidden, num_labels=10,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return _images(tf.ViTForImageClassification(config), s)


def build_clip(size: str) -> Built:
    """CLIP: a text and an image encoder; the output is the image-text similarity matrix."""
    tf, s = _transformers(), SHAPES[size]
    encoder = dict(
        hidden_size=s.hidden, intermediate_size=4 * s.hidden, num_hidden_layers=s.layers,
        num_attention_heads=s.heads, attention_dropout=0.0,
    )  # fmt: skip
    config = tf.CLIPConfig(
        text_config=dict(
            **encoder, vocab_size=s.vocab, max_position_embeddings=s.seq,
            bos_token_id=0, eos_token_id=2, pad_token_id=1,
        ),
        vision_config=dict(**encoder, image_size=s.image, patch_size=s.patch),
        projection_dim=s.hidden // 2,
    )  # fmt: skip
    model = LogitsOnly(tf.CLIPModel(config), ("input_ids", "pixel_values"), "logits_per_image")

    def inputs(texts: int, seq: int, images: int) -> tuple[torch.Tensor, ...]:
        return (
            random_tokens(s.vocab, (texts, seq)),
            *random_inputs((images, 3, s.image, s.image)),
        )

    return Built(model, inputs(s.batch, s.seq, s.batch), inputs(s.batch + 1, s.seq // 2, 1))


def _spec(name: str, what: str, build: Any, groups: tuple[str, ...] = ("suite",)) -> ModelSpec:
    return ModelSpec(name, f"transformers {what} (config, random weights)", build, ("transformers",), groups)  # fmt: skip


SPECS = [
    _spec("hf_gpt2", "GPT-2", build_gpt2, ("zoo", "suite")),
    _spec("hf_bert", "BERT masked LM", build_bert, ("zoo", "suite")),
    _spec("hf_llama", "Llama causal LM", build_llama, ("zoo", "suite")),
    _spec("hf_mistral", "Mistral causal LM, sliding window", build_mistral),
    _spec("hf_qwen2", "Qwen2 causal LM", build_qwen2),
    _spec("hf_gemma", "Gemma causal LM", build_gemma),
    _spec("hf_roberta", "RoBERTa masked LM", build_roberta),
    _spec("hf_distilbert", "DistilBERT masked LM", build_distilbert),
    _spec("hf_t5", "T5 encoder-decoder", build_t5),
    _spec("hf_vit", "ViT image classifier", build_vit),
    _spec("hf_clip", "CLIP dual encoder", build_clip),
]
