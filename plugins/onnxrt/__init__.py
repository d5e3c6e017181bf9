"""torchkiln_onnxrt: the onnxrt backend plugin."""
