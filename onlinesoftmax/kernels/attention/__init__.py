"""The attention family's Python side (kernels/attention/ holds its CUDA): attention_01 .. 07: blocked, decode, tensor cores;
each module a plan builder, launcher and NumPy model, registered in onlinesoftmax.registry."""
