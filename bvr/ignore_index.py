"""The label of positions no loss reads, in a module of its own: the data side (formats, instances) needs it
without importing torch, which takes ~1.6 s of a ``bvr data prepare`` start."""

IGNORE_INDEX = -100
"""Label of positions that are not predicted (``torch.nn.CrossEntropyLoss``'s default ``ignore_index``)."""
