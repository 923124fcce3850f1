"""The cross-entropy family (kernels/cross_entropy/): the loss of a classifier from its logits."""
