"""Spec (issue 17, Part 2 item 2): Hugging Face models run in one graph per call.

GPT-2, BERT, Llama and T5 as the benchmark zoo builds them (tiny), compiled with
``fullgraph=True``: their ``ModelOutput`` objects (dataclasses that are ``OrderedDict``s with
their own ``__setattr__`` and ``__post_init__``) are built inside the graph's frame, and one
returned from the compiled function is a real ``ModelOutput`` equal to eager's.
"""

import pytest
import torch

from kiln_testing import check_compiled

transformers = pytest.importorskip("transformers", reason="needs transformers")

from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

from benchmarks.models import MODELS, random_tokens  # noqa: E402


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_bert", "hf_llama", "hf_t5"])
def test_hf_model_one_graph_per_call(name, backend):
    built = MODELS[name].build("tiny")
    model = built.module.eval()
    vocab, shapes = model.model.config.vocab_size, [t.shape for t in built.inputs]
    seeds = iter(range(100, 200))

    def make():
        return tuple(random_tokens(vocab, tuple(shape), seed=next(seeds)) for shape in shapes)

    check_compiled(model, make, backend=backend, graphs=1, fullgraph=True)


def model_output_built_here(x, past):
    out = CausalLMOutputWithPast(logits=x.sin(), past_key_values=None, hidden_states=(past,))
    first, by_key, pair = out[0], out["logits"], out.to_tuple()
    return out, out.logits * 2 + first + by_key, len(pair), list(out.keys()), "loss" in out


def test_model_output_built_in_frame(backend):
    def make():
        return torch.randn(2, 3), torch.randn(2, 3)

    check_compiled(model_output_built_here, make, backend=backend, graphs=1, fullgraph=True)


def model_output_argument(out):
    return out.logits + out[0] + out["logits"], len(out), out.to_tuple()[1]


def test_model_output_argument(backend):
    def make():
        return (CausalLMOutputWithPast(logits=torch.randn(3), loss=torch.randn(())),)

    check_compiled(model_output_argument, make, backend=backend, graphs=1, fullgraph=True)
