"""A sweep of ``transformers`` architectures beyond the model suite: does each compile and match
eager, in inference and in a training step?

    python -m benchmarks.architectures                          # every architecture, inductor
    python -m benchmarks.architectures --models bart,wav2vec2 --backend aot_eager
    python -m benchmarks.architectures --dynamic                # symbolic sizes from the start

Each architecture is built from a tiny config with random weights (nothing is downloaded;
dropout, drop path and layer drop off) and runs in its own process (``--timeout`` seconds),
one torch thread, on the CPU. Per architecture:

* **inference** (``eval()``, ``no_grad``): the first output of the compiled model against
  eager's, at 1e-4;
* **training** (``train()``): one step of ``mean(out**2)`` (out: the loss, logits or last
  hidden state). Each parameter's gradient may be at most ``GRAD_SLACK`` times as far from
  a float64 eager step's as float32 eager's is, plus 1e-6 of the largest gradient: a
  gradient that cancels to almost nothing (a softmax's key bias) is rounding noise in both.
  A model that does not run in float64 (MoE's grouped_mm, a float64 overflow in XGLM's
  positions) is compared with float32 eager, within 1e-4 of the largest gradient.

NumPy's and torch's generators are seeded before every forward (wav2vec2 draws its
SpecAugment masks with NumPy). Prints one markdown table; ``--json`` keeps the rows.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks.tables import markdown_table

GRAD_SLACK = 4.0
V, H, LAYERS, HEADS, SEQ, BATCH = 128, 64, 2, 4, 16, 2
COMMON = dict(
    vocab_size=V,
    hidden_size=H,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=2 * H,
)
SEQ2SEQ = dict(
    vocab_size=V,
    d_model=H,
    encoder_layers=LAYERS,
    decoder_layers=LAYERS,
    encoder_attention_heads=HEADS,
    decoder_attention_heads=HEADS,
    encoder_ffn_dim=2 * H,
    decoder_ffn_dim=2 * H,
)
VISION = dict(image_size=32, patch_size=8, **COMMON)

Inputs = Callable[[], dict[str, torch.Tensor]]


def _tokens(*shape: int) -> torch.Tensor:
    return torch.randint(0, V, shape)


def _no_dropout(config: Any) -> Any:
    """Every dropout-like probability of ``config`` set to 0: eager and compiled draw apart."""
    for key, value in list(vars(config).items()):
        if "drop" in key and isinstance(value, float):
            setattr(config, key, 0.0)
    return config


def _encoder(config: Any) -> Inputs:
    return lambda: {"input_ids": _tokens(BATCH, SEQ)}


def _causal_lm(config: Any) -> Inputs:
    def inputs() -> dict[str, torch.Tensor]:
        ids = _tokens(BATCH, SEQ)
        return {"input_ids": ids, "labels": ids}

    return inputs


def _seq2seq(config: Any) -> Inputs:
    return lambda: {"input_ids": _tokens(BATCH, SEQ), "labels": _tokens(BATCH, SEQ // 2)}


def _images(config: Any) -> Inputs:
    return lambda: {"pixel_values": torch.randn(BATCH, 3, 32, 32)}


def _audio(config: Any) -> Inputs:
    return lambda: {"input_values": torch.randn(BATCH, 800)}


def _speech_to_text(config: Any) -> Inputs:
    return lambda: {"input_features": torch.randn(BATCH, 16, 32), "labels": _tokens(BATCH, 8)}


#: name -> (model class, config class, config arguments, inputs)
ARCHITECTURES: dict[str, tuple[str, str, dict, Callable[[Any], Inputs]]] = {
    "albert": ("AlbertModel", "AlbertConfig", dict(embedding_size=32, **COMMON), _encoder),
    "bart": ("BartForConditionalGeneration", "BartConfig", SEQ2SEQ, _seq2seq),
    "beit": ("BeitModel", "BeitConfig", VISION, _images),
    "bloom": ("BloomForCausalLM", "BloomConfig", dict(vocab_size=V, hidden_size=H, n_layer=LAYERS, n_head=HEADS), _causal_lm),
    "codegen": ("CodeGenForCausalLM", "CodeGenConfig", dict(vocab_size=V, n_embd=H, n_layer=LAYERS, n_head=HEADS, rotary_dim=8), _causal_lm),
    "convnext": ("ConvNextModel", "ConvNextConfig", dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1]), _images),
    "deberta": ("DebertaModel", "DebertaConfig", COMMON, _encoder),
    "deberta_v2": ("DebertaV2Model", "DebertaV2Config", COMMON, _encoder),
    "deit": ("DeiTModel", "DeiTConfig", VISION, _images),
    "dinov2": ("Dinov2Model", "Dinov2Config", VISION, _images),
    "electra": ("ElectraForMaskedLM", "ElectraConfig", dict(embedding_size=32, **COMMON), _encoder),
    "falcon": ("FalconForCausalLM", "FalconConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS), _causal_lm),
    "funnel": ("FunnelModel", "FunnelConfig", dict(vocab_size=V, block_sizes=[1, 1], d_model=H, n_head=HEADS, d_head=16, d_inner=2 * H), _encoder),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", dict(num_key_value_heads=2, head_dim=16, **COMMON), _causal_lm),
    "gpt_bigcode": ("GPTBigCodeForCausalLM", "GPTBigCodeConfig", dict(vocab_size=V, n_embd=H, n_layer=LAYERS, n_head=HEADS), _causal_lm),
    "gpt_neo": ("GPTNeoForCausalLM", "GPTNeoConfig", dict(vocab_size=V, hidden_size=H, num_layers=LAYERS, num_heads=HEADS, attention_types=[[["global", "local"], 1]], window_size=8), _causal_lm),
    "gpt_neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig", COMMON, _causal_lm),
    "gptj": ("GPTJForCausalLM", "GPTJConfig", dict(vocab_size=V, n_embd=H, n_layer=LAYERS, n_head=HEADS, rotary_dim=8), _causal_lm),
    "marian": ("MarianMTModel", "MarianConfig", dict(decoder_start_token_id=0, pad_token_id=1, **SEQ2SEQ), _seq2seq),
    "mbart": ("MBartForConditionalGeneration", "MBartConfig", SEQ2SEQ, _seq2seq),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **COMMON), _causal_lm),
    "mobilevit": ("MobileViTModel", "MobileViTConfig", dict(image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]), _images),
    "mpnet": ("MPNetModel", "MPNetConfig", COMMON, _encoder),
    "mpt": ("MptForCausalLM", "MptConfig", dict(vocab_size=V, d_model=H, n_layers=LAYERS, n_heads=HEADS), _causal_lm),
    "olmo": ("OlmoForCausalLM", "OlmoConfig", COMMON, _causal_lm),
    "opt": ("OPTForCausalLM", "OPTConfig", dict(vocab_size=V, hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS, ffn_dim=2 * H, word_embed_proj_dim=H), _causal_lm),
    "pegasus": ("PegasusForConditionalGeneration", "PegasusConfig", SEQ2SEQ, _seq2seq),
    "phi": ("PhiForCausalLM", "PhiConfig", COMMON, _causal_lm),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", dict(pad_token_id=0, **COMMON), _causal_lm),
    "qwen2_moe": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig", dict(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=H, shared_expert_intermediate_size=H, **COMMON), _causal_lm),
    "resnet": ("ResNetModel", "ResNetConfig", dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]), _images),
    "segformer": ("SegformerModel", "SegformerConfig", dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), _images),
    "stablelm": ("StableLmForCausalLM", "StableLmConfig", dict(num_key_value_heads=HEADS, **COMMON), _causal_lm),
    "starcoder2": ("Starcoder2ForCausalLM", "Starcoder2Config", dict(num_key_value_heads=2, **COMMON), _causal_lm),
    "swin": ("SwinModel", "SwinConfig", dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4), _images),
    "wav2vec2": ("Wav2Vec2Model", "Wav2Vec2Config", dict(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, **COMMON), _audio),
    "whisper": ("WhisperForConditionalGeneration", "WhisperConfig", dict(num_mel_bins=16, max_source_positions=16, max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **SEQ2SEQ), _speech_to_text),
    "xglm": ("XGLMForCausalLM", "XGLMConfig", dict(vocab_size=V, d_model=H, num_layers=LAYERS, attention_heads=HEADS, ffn_dim=2 * H), _causal_lm),
    "xlm_roberta": ("XLMRobertaForMaskedLM", "XLMRobertaConfig", COMMON, _encoder),
}  # fmt: skip


def build(name: str) -> tuple[torch.nn.Module, Inputs]:
    """The architecture's model (random weights, seed 0) and a maker of its inputs."""
    import transformers

    model_class, config_class, arguments, inputs = ARCHITECTURES[name]
    config = _no_dropout(getattr(transformers, config_class)(**arguments))
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config), inputs(config)


def first_output(output: Any) -> torch.Tensor:
    """The loss where the model computes one, else its logits or last hidden state."""
    if isinstance(output, torch.Tensor):
        return output
    for key in ("loss", "logits", "last_hidden_state"):
        value = getattr(output, key, None)
        if isinstance(value, torch.Tensor):
            return value
    return output[0]


def _seeded_step(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    np.random.seed(0)
    torch.manual_seed(0)
    out = first_output(model(**inputs))
    out.double().square().mean().backward()
    return out


def _check_gradients(
    compiled: torch.nn.Module, eager: torch.nn.Module, exact: torch.nn.Module | None
) -> None:
    """Each gradient no further from float64's than ``GRAD_SLACK`` times eager float32's;
    where the model does not run in float64 (``exact`` None), within 1e-4 of the largest
    gradient of eager's."""
    reference = eager if exact is None else exact
    with_grads = [d.grad for d in reference.parameters() if d.grad is not None]
    largest = max((g.abs().max().item() for g in with_grads), default=0.0)
    for (name, p), (_, q), (_, d) in zip(
        compiled.named_parameters(), eager.named_parameters(), reference.named_parameters()
    ):
        if d.grad is None:
            if p.grad is not None and p.grad.any():
                raise AssertionError(f"{name}: a gradient where eager has none")
            continue
        if p.grad is None:
            raise AssertionError(f"{name}: no gradient where eager has one")
        ours = (p.grad.double() - d.grad.double()).abs().max().item()
        if exact is None:
            allowed = 1e-4 * largest
        else:
            eagers = (q.grad.double() - d.grad).abs().max().item()
            allowed = GRAD_SLACK * eagers + 1e-6 * largest
        if ours > allowed:
            raise AssertionError(
                f"{name}: gradient {ours:.2e} off the reference, {allowed:.2e} allowed"
            )


def check(name: str, backend: str, dynamic: bool = False) -> dict:
    """Compile one architecture (``dynamic``: with symbolic sizes) and compare it with
    eager: its result row."""
    import torchkiln

    model, make_inputs = build(name)
    row = _row(name)
    stage = "inference"
    try:
        model.eval()
        eager, exact = copy.deepcopy(model), copy.deepcopy(model).double()
        compiled = torchkiln.compile(model, backend=backend, dynamic=dynamic or None)
        inputs = make_inputs()
        with torch.no_grad():
            torch.testing.assert_close(
                first_output(compiled(**inputs)),
                first_output(eager(**inputs)),
                rtol=1e-4,
                atol=1e-4,
            )
        row["inference"] = "ok"
        stage = "training"
        for m in (model, eager, exact):
            m.train()
        inputs = make_inputs()
        doubled = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
        try:
            _seeded_step(exact, doubled)
        except RuntimeError as e:  # MoE's grouped_mm has no float64 kernels
            exact = None
            row["note"] = f"gradients against eager float32's (float64: {str(e)[:60]})"
        torch.testing.assert_close(
            _seeded_step(compiled, inputs), _seeded_step(eager, inputs), rtol=1e-4, atol=1e-4
        )
        _check_gradients(model, eager, exact)
        row["training"] = "ok"
    except Exception as e:
        row[stage] = "FAIL"
        message = str(e).strip().splitlines()
        row["note"] = f"{type(e).__name__}: {message[0][:160] if message else ''}"
        traceback.print_exc()
    return row


def _row(name: str, note: str = "") -> dict:
    return {"model": name, "inference": "-", "training": "-", "note": note}


def _run_child(name: str, backend: str, dynamic: bool, timeout: float) -> dict:
    command = [sys.executable, "-m", "benchmarks.architectures", "--child", name]
    command += ["--backend", backend, *(["--dynamic"] if dynamic else [])]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return _row(name, f"timed out ({timeout} s)")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return _row(name, f"exit {done.returncode}")
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all", help="comma-separated names, or all")
    p.add_argument("--backend", default="inductor")
    p.add_argument(
        "--dynamic", action="store_true", help="compile with dynamic=True (symbolic sizes)"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per architecture")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.child:
        print(json.dumps(check(args.child, args.backend, args.dynamic)), flush=True)
        return
    names = list(ARCHITECTURES) if args.models == "all" else args.models.split(",")
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        p.error(f"unknown architectures {unknown}; known: {', '.join(ARCHITECTURES)}")
    env_note = f"torch {torch.__version__}, backend {args.backend}, one thread, CPU"
    env_note += ", dynamic=True" if args.dynamic else ""
    rows = []
    for name in names:
        rows.append(_run_child(name, args.backend, args.dynamic, args.timeout))
        print(f"{name}: {rows[-1]['inference']} / {rows[-1]['training']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env_note, "rows": rows}, f, indent=1)
    passed = sum(r["inference"] == "ok" and r["training"] == "ok" for r in rows)
    print(f"## Architectures ({env_note}): {passed} of {len(rows)} pass\n")
    print(
        markdown_table(["model", "inference", "training", "note"], [list(r.values()) for r in rows])
    )


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
