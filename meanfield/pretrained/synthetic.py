"""Write a checkpoint with random weights in the real format: examples and tests without a download.

:func:`write_random_checkpoint` writes ``config.json`` and ``model.safetensors`` with the tensor
names and layouts of :data:`~meanfield.pretrained.architectures.ARCHITECTURES`, so that the
reader (and Hugging Face ``transformers``) read it as they read a trained one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from ..checks import check_int, check_real
from .architectures import ARCHITECTURES

#: ``config.json`` entries each family needs besides its sizes.
_EXTRA_CONFIG = {
    "bert": {"architectures": ["BertModel"], "hidden_act": "gelu", "layer_norm_eps": 1e-12, "type_vocab_size": 2,
             "position_embedding_type": "absolute", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    "albert": {"architectures": ["AlbertModel"], "hidden_act": "gelu_new", "layer_norm_eps": 1e-12,
               "type_vocab_size": 2, "num_hidden_groups": 1, "inner_group_num": 1, "hidden_dropout_prob": 0.0,
               "attention_probs_dropout_prob": 0.0, "position_embedding_type": "absolute"},
    "gpt2": {"architectures": ["GPT2Model"], "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
}

#: Each family's names for the vocabulary and the number of positions.
_TABLE_SIZES = {"bert": ("vocab_size", "max_position_embeddings"), "albert": ("vocab_size", "max_position_embeddings"),
                "gpt2": ("vocab_size", "n_positions")}


def write_random_checkpoint(folder: object, model_type: str, *, hidden: int = 32, heads: int = 4, layers: int = 4,
                            inner: int | None = None, vocabulary: int = 64, positions: int = 64,
                            embedding: int | None = None, scale: float = 1.0, seed: int = 0,
                            dtype: str = "float32") -> Path:
    r"""Write a checkpoint of ``model_type`` with random weights; returns the folder.

    Linear maps have iid entries :math:`N(0, \text{scale}^2/\text{fan-in})`, embeddings
    :math:`N(0, 1)`, biases :math:`N(0, 0.1^2)`, norm gains :math:`1 + N(0, 0.1^2)` and norm
    biases :math:`N(0, 0.1^2)` (so that every bias of the real blocks is exercised).

    Parameters
    ----------
    folder : str or os.PathLike
        Created if missing; ``config.json`` and ``model.safetensors`` are overwritten.
    model_type : {"albert", "bert", "gpt2"}
    hidden, heads, layers, inner, vocabulary, positions : int
        The sizes; ``inner`` defaults to ``4 hidden``.
    embedding : int, optional
        ALBERT's embedding size (default ``hidden // 2``).
    scale : float
        The linear maps' gain.
    seed : int
        The draw (the same seed writes the same tensors).
    dtype : {"float32", "float64"}
        The tensors' storage type.

    Returns
    -------
    pathlib.Path
    """
    if model_type not in ARCHITECTURES:
        raise ValueError(f"model_type must be one of {sorted(ARCHITECTURES)}, got {model_type!r}")
    hidden, heads, layers = (check_int(v, name, minimum=1) for v, name in
                             ((hidden, "hidden"), (heads, "heads"), (layers, "layers")))
    if hidden % heads:
        raise ValueError(f"hidden = {hidden} must be a multiple of heads = {heads}")
    inner = 4 * hidden if inner is None else check_int(inner, "inner", minimum=1)
    vocabulary, positions = check_int(vocabulary, "vocabulary", minimum=1), check_int(positions, "positions", minimum=1)
    scale = check_real(scale, "scale", minimum=0.0)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    architecture = ARCHITECTURES[model_type]
    size = (embedding or max(1, hidden // 2)) if model_type == "albert" else hidden
    rng = np.random.default_rng(seed)
    tensors = {}

    def linear(prefix, inputs, outputs):
        weight = rng.normal(0.0, scale / np.sqrt(inputs), (inputs, outputs))
        tensors[prefix + ".weight"] = weight.T if architecture.linear_layout == "out_in" else weight
        tensors[prefix + ".bias"] = rng.normal(0.0, 0.1, outputs)

    def norm(prefix, width):
        tensors[prefix + ".weight"] = 1.0 + rng.normal(0.0, 0.1, width)
        tensors[prefix + ".bias"] = rng.normal(0.0, 0.1, width)

    names = architecture.embeddings
    tensors[names["word"]] = rng.normal(0.0, 1.0, (vocabulary, size))
    tensors[names["position"]] = rng.normal(0.0, 1.0, (positions, size))
    if "token_type" in names:
        tensors[names["token_type"]] = rng.normal(0.0, 1.0, (2, size))
    if "norm" in names:
        norm(names["norm"], size)
    if "projection" in names:
        linear(names["projection"], size, hidden)
    for block in range(1 if architecture.shared_layers else layers):
        parts = {role: architecture.block.format(layer=block) + name for role, name in architecture.parts.items()}
        if architecture.fused_qkv:
            linear(parts["qkv"], hidden, 3 * hidden)
        else:
            for role in ("query", "key", "value"):
                linear(parts[role], hidden, hidden)
        linear(parts["output"], hidden, hidden)
        linear(parts["inner"], hidden, inner)
        linear(parts["outer"], inner, hidden)
        norm(parts["attention_norm"], hidden)
        norm(parts["feed_forward_norm"], hidden)
    if architecture.final_norm:
        norm(architecture.final_norm, hidden)

    sizes = architecture.sizes
    vocab_key, positions_key = _TABLE_SIZES[model_type]
    config = {"model_type": model_type, **_EXTRA_CONFIG[model_type], sizes["hidden"]: hidden, sizes["heads"]: heads,
              sizes["layers"]: layers, sizes["inner"]: inner, vocab_key: vocabulary, positions_key: positions}
    if model_type == "albert":
        config["embedding_size"] = size
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({name: np.ascontiguousarray(t, dtype=dtype) for name, t in tensors.items()},
              str(folder / "model.safetensors"))
    return folder
