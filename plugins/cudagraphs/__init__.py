"""torchkiln_cudagraphs: the cudagraphs backend plugin."""
