r"""Read a Hugging Face checkpoint (``config.json`` and ``model.safetensors``) into numpy blocks.

:func:`read_checkpoint` takes a local folder, as ``save_pretrained`` writes it or as a user's
own tooling downloaded it; the library never downloads. The tensors are read with the
``safetensors`` package's numpy API (no deep-learning framework) and cast to float64; the
families it can map are those of :data:`~meanfield.pretrained.architectures.ARCHITECTURES`
(ALBERT, BERT, GPT-2). Anything it cannot map, a missing or malformed file, an unknown family,
a tensor of the wrong shape, is refused by :class:`CheckpointError` in one line that names the
file and the key.

:class:`Transformer` runs the real forward pass (:meth:`Transformer.hidden_states`) and
records the hidden states of every layer as a particle dataset: layers are the ``time``
coordinate, tokens the ``particle`` dimension, so that the library's observables apply
unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr
from safetensors import SafetensorError
from safetensors.numpy import load_file

from ..records import PARTICLES, euclidean_name, record_attrs
from ..sphere import normalize
from .architectures import ARCHITECTURES, Architecture
from .layers import ACTIVATIONS, Block, FeedForward, LayerNorm, MultiHeadAttention

#: The weight files of other formats, and how to turn them into safetensors.
OTHER_FORMATS = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack", "model.ckpt.index")


class CheckpointError(ValueError):
    """A checkpoint the reader cannot map: the message names the file and the key."""


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (a checkpoint folder holds config.json and model.safetensors)")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(config).__name__}")
    return config


def _weight_files(folder: Path) -> list[Path]:
    """``model.safetensors``, or the shards its index lists; other formats are refused with the remedy."""
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as error:
            raise CheckpointError(f"{index}: not a safetensors index (no 'weight_map': {error!r})") from None
        return [folder / shard for shard in shards]
    other = [name for name in OTHER_FORMATS if (folder / name).exists()]
    if other:
        raise CheckpointError(f"{folder / other[0]}: a checkpoint in another format; the reader takes safetensors "
                              "(transformers' save_pretrained writes model.safetensors)")
    raise CheckpointError(f"{single}: no such file (nor a sharded model.safetensors.index.json)")


def _read_tensors(files: list[Path], architecture: Architecture) -> dict[str, tuple[np.ndarray, Path]]:
    """Every tensor as float64 by its name inside the model (wrapper prefixes stripped, gamma/beta renamed)."""
    tensors = {}
    for path in files:
        try:
            loaded = load_file(str(path))
        except (SafetensorError, OSError, ValueError, TypeError) as error:
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from None
        for name, array in loaded.items():
            for prefix in architecture.prefixes:
                if name.startswith(prefix):
                    name = name[len(prefix):]
                    break
            if name.endswith(".gamma"):  # checkpoints converted from TensorFlow
                name = name[: -len("gamma")] + "weight"
            elif name.endswith(".beta"):
                name = name[: -len("beta")] + "bias"
            tensors[name] = (array, path)
    return tensors


class _Reader:
    """Takes tensors by name and shape, and says which file and key are wrong when one is."""

    def __init__(self, folder: Path, config: dict, architecture: Architecture):
        self.folder = folder
        self.config = config
        self.architecture = architecture
        self.files = _weight_files(folder)
        self.tensors = _read_tensors(self.files, architecture)

    def size(self, role: str, *, default: int | None = None) -> int:
        key = self.architecture.sizes[role]
        value = self.config.get(key)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{self.folder / 'config.json'}: {key} must be a positive integer, got {value!r}")
        return value

    def number(self, role: str) -> float:
        key = self.architecture.sizes[role]
        value = self.config.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise CheckpointError(f"{self.folder / 'config.json'}: {key} must be a number > 0, got {value!r}")
        return float(value)

    def tensor(self, name: str, shape: tuple[int | None, ...], what: str) -> np.ndarray:
        """The tensor ``name`` as float64; ``None`` in ``shape`` takes any length there."""
        if name not in self.tensors:
            raise CheckpointError(f"{self.files[0]}: no tensor {name!r} ({what})")
        array, path = self.tensors[name]
        if len(array.shape) != len(shape) or any(e is not None and a != e for a, e in zip(array.shape, shape)):
            raise CheckpointError(f"{path}: tensor {name!r} ({what}) has shape {array.shape}, expected {shape} "
                                  f"from config.json")
        if not np.issubdtype(array.dtype, np.floating):
            raise CheckpointError(f"{path}: tensor {name!r} ({what}) has dtype {array.dtype}, expected floats")
        if not np.all(np.isfinite(array)):
            raise CheckpointError(f"{path}: tensor {name!r} ({what}) holds NaN or infinite entries")
        return np.asarray(array, dtype=np.float64)

    def linear(self, prefix: str, inputs: int, outputs: int, what: str) -> tuple[np.ndarray, np.ndarray]:
        """A linear map as ``(weight (inputs, outputs), bias (outputs,))``, tokens as rows."""
        if self.architecture.linear_layout == "out_in":
            weight = self.tensor(prefix + ".weight", (outputs, inputs), what).T
        else:
            weight = self.tensor(prefix + ".weight", (inputs, outputs), what)
        return weight, self.tensor(prefix + ".bias", (outputs,), what)

    def norm(self, prefix: str, d: int, what: str) -> LayerNorm:
        return LayerNorm(self.tensor(prefix + ".weight", (d,), what), self.tensor(prefix + ".bias", (d,), what),
                         self.number("eps"))


def _check_supported(folder: Path, config: dict, architecture: Architecture) -> None:
    """Refuse the configuration switches whose blocks the reader does not build."""
    where = folder / "config.json"
    refused = {
        "position_embedding_type": lambda v: v not in (None, "absolute"),
        "inner_group_num": lambda v: v not in (None, 1),
        "scale_attn_by_inverse_layer_idx": lambda v: bool(v),
        "scale_attn_weights": lambda v: v is False,
        "add_cross_attention": lambda v: bool(v),
    }
    for key, unsupported in refused.items():
        if unsupported(config.get(key)):
            raise CheckpointError(f"{where}: {key} = {config[key]!r} is not mapped (the reader builds "
                                  f"{architecture.model_type}'s default blocks)")
    activation = config.get(architecture.sizes["activation"])
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"{where}: {architecture.sizes['activation']} = {activation!r} is not one of "
                              f"{sorted(ACTIVATIONS)}")


@dataclass(frozen=True, eq=False)
class Embeddings:
    r"""Token embeddings: word plus absolute position (plus token type), normalised, projected.

    ``x_i = P(N(W[t_i] + E[i] + T[s_i]))`` with the optional norm ``N`` (BERT, ALBERT) and
    projection ``P`` (ALBERT's embedding size to hidden size).

    Parameters
    ----------
    word : numpy.ndarray, shape (vocabulary, e)
    position : numpy.ndarray, shape (positions, e)
    token_type : numpy.ndarray, shape (types, e), or None
    norm : LayerNorm or None
    projection : tuple of numpy.ndarray, or None
        ``(weight (e, d), bias (d,))``.
    """

    word: np.ndarray
    position: np.ndarray
    token_type: np.ndarray | None
    norm: LayerNorm | None
    projection: tuple[np.ndarray, np.ndarray] | None

    def __call__(self, ids: np.ndarray, token_types: np.ndarray | None = None) -> np.ndarray:
        x = self.word[ids] + self.position[np.arange(ids.shape[-1])]
        if self.token_type is not None:
            x = x + self.token_type[np.zeros_like(ids) if token_types is None else token_types]
        if self.norm is not None:
            x = self.norm(x)
        if self.projection is not None:
            weight, bias = self.projection
            x = x @ weight + bias
        return x


@dataclass(frozen=True, eq=False)
class Transformer:
    """A trained Transformer read from a checkpoint: embeddings, blocks, and the final norm.

    Parameters
    ----------
    architecture : Architecture
        The family's mapping (an entry of ``meanfield.pretrained.ARCHITECTURES``).
    config : dict
        ``config.json``.
    embeddings : Embeddings
    blocks : tuple of Block
        One per layer; ALBERT's shared layers are the same objects.
    final_norm : LayerNorm or None
        The norm after the last block (pre-LN models).
    source : str
        The folder it was read from.
    """

    architecture: Architecture
    config: dict
    embeddings: Embeddings
    blocks: tuple[Block, ...]
    final_norm: LayerNorm | None
    source: str

    @property
    def dimension(self) -> int:
        """The hidden size ``d``."""
        return self.blocks[0].attention.query.shape[1]

    @property
    def layers(self) -> int:
        return len(self.blocks)

    def embed(self, ids: object, token_types: object | None = None) -> np.ndarray:
        """The input embeddings of token ids, shape ``(n, d)`` (or ``(..., n, d)`` for a batch of prompts).

        Parameters
        ----------
        ids : array_like of int, shape (..., n)
            Token ids, ``0 <= id < vocabulary``; ``n`` at most the number of positions.
        token_types : array_like of int, optional
            BERT and ALBERT's segment ids (default all zero).

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The first block's input.

        Raises
        ------
        ValueError
            Naming ``ids``, when an id or the length is out of range.
        """
        ids = np.asarray(ids)
        vocabulary, positions = self.embeddings.word.shape[0], self.embeddings.position.shape[0]
        if not np.issubdtype(ids.dtype, np.integer) or ids.ndim < 1 or ids.size == 0:
            raise ValueError(f"ids must be a non-empty integer array (..., n), got {ids!r}")
        if ids.min() < 0 or ids.max() >= vocabulary:
            raise ValueError(f"ids must lie in [0, {vocabulary}) (the vocabulary), got values in "
                             f"[{ids.min()}, {ids.max()}]")
        if ids.shape[-1] > positions:
            raise ValueError(f"ids has {ids.shape[-1]} tokens, more than the {positions} positions of the model")
        return self.embeddings(ids, None if token_types is None else np.asarray(token_types))

    def hidden_states(self, ids: object | None = None, *, embeddings: object | None = None):
        """The real forward pass: the hidden states of every layer as a particle dataset.

        Parameters
        ----------
        ids : array_like of int, shape (n,), optional
            Token ids (embedded with :meth:`embed`).
        embeddings : array_like, shape (n, d), optional
            The input of the first block instead of ``ids`` (the same input for the library's
            dynamics, :func:`validation.compare_dynamics`).

        Returns
        -------
        xarray.Dataset
            ``x`` (time, particle, component): the residual stream, ``time = 0`` the input and
            ``time = l`` after block ``l``; ``u``: its directions :math:`x/|x|`, which the
            sphere's observables (:func:`meanfield.mean_inner_product`, ...) read unchanged;
            ``output``: the model's output (the final norm of the
            last layer for pre-LN models, else the last layer).

        Raises
        ------
        ValueError
            When neither or both of ``ids`` and ``embeddings`` are given, or they have the wrong shape.
        """
        x = self._input(ids, embeddings)
        frames = [x]
        for block in self.blocks:
            frames.append(block(frames[-1]))
        output = frames[-1] if self.final_norm is None else self.final_norm(frames[-1])
        settings = {"source": self.source, "placement": self.architecture.placement,
                    "causal": self.architecture.causal}
        x = np.stack(frames)
        ds = xr.Dataset({"x": (("time", "particle", "component"), x),
                         "u": (("time", "particle", "component"), normalize(x),
                               {"long_name": "the tokens' directions x / |x| (the sphere's observables read them)"}),
                         "output": (("particle", "component"), output)},
                        coords={"time": np.arange(self.layers + 1.0)})
        ds["time"].attrs["long_name"] = "layer"
        ds.attrs.update(record_attrs(PARTICLES, euclidean_name(self.dimension), self, settings))
        return ds

    def _input(self, ids, embeddings) -> np.ndarray:
        if (ids is None) == (embeddings is None):
            raise ValueError("give either ids (token ids) or embeddings (the first block's input), not both or neither")
        if ids is not None:
            ids = np.asarray(ids)
            if ids.ndim != 1:
                raise ValueError(f"ids must be one prompt, shape (n,), got shape {ids.shape}")
            return self.embed(ids)
        x = np.asarray(embeddings, dtype=float)
        if x.ndim != 2 or x.shape[1] != self.dimension or not np.all(np.isfinite(x)):
            raise ValueError(f"embeddings must be finite with shape (n, {self.dimension}), got shape {x.shape}")
        return x

    def to_dict(self) -> dict:
        """The record of a dataset.

        Returns
        -------
        dict
            The family, the sizes and the source folder.
        """
        return {"model": "Transformer", "model_type": self.architecture.model_type, "source": self.source,
                "layers": self.layers, "dimension": self.dimension, "heads": self.blocks[0].attention.heads}


def read_checkpoint(path: object) -> Transformer:
    """Read a checkpoint folder (``config.json``, ``model.safetensors``) of the ALBERT, BERT or GPT-2 family.

    Parameters
    ----------
    path : str or os.PathLike
        A local folder as ``save_pretrained`` writes it (the library never downloads).

    Returns
    -------
    Transformer

    Raises
    ------
    CheckpointError
        In one line naming the file and the key: no such folder or file, malformed JSON, an
        unknown ``model_type``, a switch the reader does not map, a missing tensor or one of the
        wrong shape or dtype, weights in another format than safetensors.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder (a checkpoint folder holds config.json and model.safetensors)")
    config = _read_config(folder)
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise CheckpointError(f"{folder / 'config.json'}: model_type = {model_type!r} is not one of "
                              f"{sorted(ARCHITECTURES)} (meanfield.pretrained.ARCHITECTURES maps a family)")
    architecture = ARCHITECTURES[model_type]
    _check_supported(folder, config, architecture)
    reader = _Reader(folder, config, architecture)
    d, heads, layers = reader.size("hidden"), reader.size("heads"), reader.size("layers")
    if d % heads:
        raise CheckpointError(f"{folder / 'config.json'}: {architecture.sizes['hidden']} = {d} is not a multiple "
                              f"of {architecture.sizes['heads']} = {heads}")
    groups = _groups(reader, layers) if architecture.shared_layers else layers
    built = [_block(reader, group, d, heads) for group in range(groups)]
    blocks = tuple(built[(layer * groups) // layers] for layer in range(layers))
    final = None if architecture.final_norm is None else reader.norm(architecture.final_norm, d, "final norm")
    return Transformer(architecture, config, _embeddings(reader, d), blocks, final, str(folder))


def _groups(reader: _Reader, layers: int) -> int:
    """ALBERT: the number of groups of shared weights (layer ``l`` uses group ``l * groups // layers``)."""
    groups = reader.config.get("num_hidden_groups", 1)
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= layers:
        raise CheckpointError(f"{reader.folder / 'config.json'}: num_hidden_groups must be an integer in "
                              f"[1, {layers}], got {groups!r}")
    return groups


def _block(reader: _Reader, layer: int, d: int, heads: int) -> Block:
    architecture = reader.architecture
    prefix = architecture.block.format(layer=layer)
    parts = {role: prefix + name for role, name in architecture.parts.items()}
    what = f"block {layer}"
    if architecture.fused_qkv:
        weight, bias = reader.linear(parts["qkv"], d, 3 * d, f"{what}'s fused query, key and value")
        projections = [(weight[:, i * d:(i + 1) * d], bias[i * d:(i + 1) * d]) for i in range(3)]
    else:
        projections = [reader.linear(parts[role], d, d, f"{what}'s {role}") for role in ("query", "key", "value")]
    k = d // heads

    def per_head(weight, bias):
        return weight.reshape(d, heads, k).transpose(1, 0, 2), bias.reshape(heads, k)

    (query, query_bias), (key, key_bias), (value, value_bias) = (per_head(*p) for p in projections)
    output, output_bias = reader.linear(parts["output"], d, d, f"{what}'s output projection")
    attention = MultiHeadAttention(query, query_bias, key, key_bias, value, value_bias, output.reshape(heads, k, d),
                                   output_bias, causal=architecture.causal)
    width = reader.size("inner", default=4 * d)
    inner, inner_bias = reader.linear(parts["inner"], d, width, f"{what}'s feed-forward input")
    outer, outer_bias = reader.linear(parts["outer"], width, d, f"{what}'s feed-forward output")
    feed_forward = FeedForward(inner, inner_bias, outer, outer_bias, reader.config[architecture.sizes["activation"]])
    return Block(attention, feed_forward, reader.norm(parts["attention_norm"], d, f"{what}'s attention norm"),
                 reader.norm(parts["feed_forward_norm"], d, f"{what}'s feed-forward norm"), architecture.placement)


def _embeddings(reader: _Reader, d: int) -> Embeddings:
    names = reader.architecture.embeddings
    word = reader.tensor(names["word"], (reader.config.get("vocab_size"), None), "word embeddings")
    size = word.shape[1]  # ALBERT's embedding size, else the hidden size
    position = reader.tensor(names["position"], (None, size), "position embeddings")
    token_type = None
    if "token_type" in names:
        types = reader.config.get("type_vocab_size", 2)
        token_type = reader.tensor(names["token_type"], (types, size), "token-type embeddings")
    norm = reader.norm(names["norm"], size, "embedding norm") if "norm" in names else None
    projection = None
    if "projection" in names:
        projection = reader.linear(names["projection"], size, d, "embedding projection")
    elif size != d:
        raise CheckpointError(f"{reader.files[0]}: tensor {names['word']!r} (word embeddings) has width {size}, "
                              f"expected the hidden size {d}")
    return Embeddings(word, position, token_type, norm, projection)
