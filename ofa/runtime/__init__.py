"""Runtimes that time and run a model (ONNX Runtime, OpenVINO, ExecuTorch), and the ONNX conversion they share."""
