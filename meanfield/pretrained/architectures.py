"""Where each family of Hugging Face checkpoints keeps its weights: the mapping table.

A family is data, not code: the ``config.json`` keys of its sizes, the tensor names of its
embeddings, of one block (with ``{layer}`` for the block's index) and of its final norm, how
its linear maps are stored (``torch.nn.Linear``: ``(out, in)``; GPT-2's ``Conv1D``:
``(in, out)``), whether query, key and value are one fused tensor, where layer normalisation
sits, and whether attention is causal. Another family that is built like these three is one
more entry of :data:`ARCHITECTURES`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    """How one family's ``config.json`` and tensors map onto a Transformer's blocks.

    Parameters
    ----------
    model_type : str
        ``config.json``'s ``model_type``.
    prefixes : tuple of str
        Tensor-name prefixes of the task heads' wrappers, stripped on reading (``"bert."`` of a
        ``BertForMaskedLM``).
    sizes : dict
        Role -> ``config.json`` key: ``hidden``, ``heads``, ``layers``, ``eps``, ``activation``,
        ``inner`` (the feed-forward width; ``None`` when the family fixes it at ``4 hidden``).
    embeddings : dict
        Role -> tensor name: ``word``, ``position``, optionally ``token_type``, ``norm`` (a
        prefix: ``.weight`` and ``.bias`` follow) and ``projection`` (ALBERT's map from the
        embedding size to the hidden size).
    block : str
        The prefix of block ``{layer}``'s tensors.
    parts : dict
        Role -> tensor prefix inside a block (``.weight`` and ``.bias`` follow): ``query``,
        ``key``, ``value`` (or ``qkv`` when fused), ``output``, ``attention_norm``, ``inner``,
        ``outer``, ``feed_forward_norm``.
    linear_layout : {"out_in", "in_out"}
        How a linear map's weight is stored.
    placement : {"post", "pre"}
        Post-LN (``x <- N(x + f(x))``, BERT and ALBERT) or pre-LN (``x <- x + f(N(x))``, GPT-2).
    causal : bool
        Whether token ``i`` attends to tokens ``j <= i`` only.
    final_norm : str or None
        The prefix of the norm applied after the last block (pre-LN models), or ``None``.
    shared_layers : bool
        Whether the blocks are groups of shared weights (ALBERT: ``num_hidden_groups`` groups).
    """

    model_type: str
    prefixes: tuple[str, ...]
    sizes: dict
    embeddings: dict
    block: str
    parts: dict
    linear_layout: str
    placement: str
    causal: bool
    final_norm: str | None = None
    shared_layers: bool = False

    @property
    def fused_qkv(self) -> bool:
        """Whether query, key and value are one tensor (GPT-2's ``c_attn``)."""
        return "qkv" in self.parts


#: ``config.json``'s size keys of BERT and its descendants (ALBERT).
_BERT_SIZES = {"hidden": "hidden_size", "heads": "num_attention_heads", "layers": "num_hidden_layers",
               "eps": "layer_norm_eps", "activation": "hidden_act", "inner": "intermediate_size"}

BERT = Architecture(
    model_type="bert",
    prefixes=("bert.",),
    sizes=_BERT_SIZES,
    embeddings={"word": "embeddings.word_embeddings.weight", "position": "embeddings.position_embeddings.weight",
                "token_type": "embeddings.token_type_embeddings.weight", "norm": "embeddings.LayerNorm"},
    block="encoder.layer.{layer}.",
    parts={"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
           "output": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
           "inner": "intermediate.dense", "outer": "output.dense", "feed_forward_norm": "output.LayerNorm"},
    linear_layout="out_in", placement="post", causal=False)

ALBERT = Architecture(
    model_type="albert",
    prefixes=("albert.",),
    sizes=_BERT_SIZES,
    embeddings={"word": "embeddings.word_embeddings.weight", "position": "embeddings.position_embeddings.weight",
                "token_type": "embeddings.token_type_embeddings.weight", "norm": "embeddings.LayerNorm",
                "projection": "encoder.embedding_hidden_mapping_in"},
    block="encoder.albert_layer_groups.{layer}.albert_layers.0.",
    parts={"query": "attention.query", "key": "attention.key", "value": "attention.value",
           "output": "attention.dense", "attention_norm": "attention.LayerNorm",
           "inner": "ffn", "outer": "ffn_output", "feed_forward_norm": "full_layer_layer_norm"},
    linear_layout="out_in", placement="post", causal=False, shared_layers=True)

GPT2 = Architecture(
    model_type="gpt2",
    prefixes=("transformer.",),
    sizes={"hidden": "n_embd", "heads": "n_head", "layers": "n_layer", "eps": "layer_norm_epsilon",
           "activation": "activation_function", "inner": "n_inner"},
    embeddings={"word": "wte.weight", "position": "wpe.weight"},
    block="h.{layer}.",
    parts={"qkv": "attn.c_attn", "output": "attn.c_proj", "attention_norm": "ln_1",
           "inner": "mlp.c_fc", "outer": "mlp.c_proj", "feed_forward_norm": "ln_2"},
    linear_layout="in_out", placement="pre", causal=True, final_norm="ln_f")

#: The families the reader knows, by ``config.json``'s ``model_type``.
ARCHITECTURES = {architecture.model_type: architecture for architecture in (BERT, ALBERT, GPT2)}
