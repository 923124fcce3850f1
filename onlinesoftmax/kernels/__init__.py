"""The kernels' Python side, a room per family mirroring the CUDA under kernels/: softmax/, logsumexp/,
topk/ and attention/, each module holding its variants' plan, launcher and NumPy model side by side,
registered in `onlinesoftmax.registry`; dispatch.py chooses for variant="auto". (The rooms are not
onlinesoftmax.softmax etc.: those names are the public functions.)"""
