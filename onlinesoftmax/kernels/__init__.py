"""The kernels' Python side: one module per kernel family, holding each variant's plan, launcher
and NumPy model side by side, registered in `onlinesoftmax.registry`."""
