"""torchkiln_onnxrt: the onnxrt backend plugin (FX → ONNX → onnxruntime).

Kept empty so that listing backends does not import onnx: the converter is
``torchkiln_onnxrt.compiler.compile_aten_graph``.
"""
