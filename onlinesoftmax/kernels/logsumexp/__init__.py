"""The logsumexp family's Python side (kernels/logsumexp/ holds its CUDA): logsumexp_01/02/03 and log_softmax_01/02;
each module a plan builder, launcher and NumPy model, registered in onlinesoftmax.registry."""
