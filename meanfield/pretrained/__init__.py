"""Trained Transformers: read Hugging Face checkpoints and run their real forward pass in numpy.

Public names::

    read_checkpoint, Transformer, CheckpointError   the reader and the model it returns
    write_random_checkpoint                         a checkpoint with random weights, in the real format
    MultiHeadAttention, FeedForward, LayerNorm, Block, Embeddings
                                                    the blocks (with the papers' folded matrices)
    ARCHITECTURES, Architecture                     the mapping table (ALBERT, BERT, GPT-2)
    ACTIVATIONS                                     the feed-forward activations by config name

``safetensors`` reads the tensors (numpy API, no deep-learning framework). The comparison of a
real model's hidden states with the mean-field dynamics is :func:`validation.compare_dynamics`.
"""

from .architectures import ARCHITECTURES, Architecture
from .checkpoint import CheckpointError, Embeddings, Transformer, read_checkpoint
from .layers import ACTIVATIONS, Block, FeedForward, LayerNorm, MultiHeadAttention
from .synthetic import write_random_checkpoint

__all__ = ["read_checkpoint", "Transformer", "CheckpointError", "write_random_checkpoint", "MultiHeadAttention",
           "FeedForward", "LayerNorm", "Block", "Embeddings", "ARCHITECTURES", "Architecture", "ACTIVATIONS"]
