"""What a model is and costs: op histogram, parameters, FLOPs."""
from workbench.analysis.flops import node_flops, onnx_nodes, op_histogram, total_flops

__all__ = ["node_flops", "onnx_nodes", "op_histogram", "total_flops"]
