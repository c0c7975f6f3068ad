"""Export of a chosen subnet: verified ONNX and edge formats, INT8, model folder and card, Hub push."""
