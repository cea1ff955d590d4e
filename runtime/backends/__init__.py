"""The engines the runtime serves artifacts with, behind one interface (base.py): LiteRT (litert.py, with
litert_run.py's interpreter helpers), ONNX Runtime (onnx.py), Core ML (coreml.py), ExecuTorch
(executorch.py); registry.py picks them by profile and artifact, probe.py opens a model in a child first."""
