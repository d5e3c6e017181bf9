"""torchkiln_inductor: the inductor backend plugin."""
