"""The topk family's Python side (kernels/topk/ holds its CUDA): softmax_topk_01 .. 06: fused softmax + top-k;
each module a plan builder, launcher and NumPy model, registered in onlinesoftmax.registry."""
