"""torchkiln_tvm: the tvm backend plugin."""
