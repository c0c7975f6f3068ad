"""Deployment: runtimes, timing, latency-table build and check, ONNX conversion, verification, export.

This layer may import ``search`` and the core of ``ofa``; nothing below it imports it.
"""
