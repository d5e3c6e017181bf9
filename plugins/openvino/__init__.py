"""torchkiln_openvino: the openvino backend plugin."""
