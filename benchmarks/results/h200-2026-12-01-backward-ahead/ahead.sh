#!/usr/bin/env bash
# Session 18, call 2: the backward compiled with the forward (backward_ahead) on the GPU:
# the model suite's training steps under the inductor on CUDA (float32, gradients vs eager),
# then the cold compile phases of the training rows against torch.compile.
set -u
PY=python3
. tools/gpu_setup.sh
export PYTHONPATH=.
TORCHKILN_MODELS_DEVICE=cuda timeout 250 $PY -m pytest -q -p no:cacheprovider -n 4 \
    tests/models/test_model_suite.py -k "test_training and inductor" 2>&1 | tail -n 25 | tee "$OUT/suite-training-cuda.txt"
timeout 280 $PY -m benchmarks.compile_phases --device cuda --models mlp,nanogpt,hf_bert \
    --case training --backends kiln:inductor,torch.compile 2>&1 | tee "$OUT/phases-training.txt"
