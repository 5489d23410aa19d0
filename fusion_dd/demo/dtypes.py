"""Dtype names of the graph IR (numpy-free, so graph code can be imported cheaply)."""

FP16 = "float16"
FP32 = "float32"
INT32 = "int32"
