"""The sampling family (kernels/sampling/): one token per row of logits, drawn from their softmax."""
