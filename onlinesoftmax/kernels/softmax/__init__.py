"""The softmax family's Python side (kernels/softmax/ holds its CUDA): softmax_00 .. 14: the teaching kernels, masks, fp16, split-merge and the fast ladder;
each module a plan builder, launcher and NumPy model, registered in onlinesoftmax.registry."""
