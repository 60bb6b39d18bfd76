"""Functions written in a config as arithmetic expressions (a graphon ``W(x, y)``), read without ``eval``'s reach.

An expression may use the variables it is given (``x`` and ``y`` for a graphon), numbers, the
constants ``pi`` and ``e``, the operators ``+ - * / **``, comparisons (``x < 0.5`` is 1 where it
holds, 0 elsewhere) and the functions of :data:`FUNCTIONS`; anything else (attributes, other
names, subscripts, lambdas) is refused when the config is checked, naming the key. The tree is
walked here, node by node, with numpy's functions: nothing is compiled or imported.
"""

from __future__ import annotations

import ast
import operator
from typing import Callable

import numpy as np

#: The functions an expression may call, by name (numpy's, elementwise).
FUNCTIONS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin, "cos": np.cos,
             "minimum": np.minimum, "maximum": np.maximum}

#: The constants an expression may name.
CONSTANTS = {"pi": np.pi, "e": np.e}

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_COMPARE = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal}


def parse_function(text: str, variables: tuple[str, ...], name: str) -> Callable[..., np.ndarray]:
    """The vectorized function of ``variables`` that ``text`` writes.

    Parameters
    ----------
    text : str
        The expression, such as ``"x * y"`` or ``"exp(-abs(x - y) / 0.2)"``.
    variables : tuple of str
        Its arguments' names, in call order.
    name : str
        The config key, for the error messages.

    Returns
    -------
    callable
        ``f(*arrays)``: the expression at the broadcast arrays, as floats.

    Raises
    ------
    ValueError
        If ``text`` is not an expression or uses anything outside the module docstring's list,
        naming ``name`` and the offending part.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"{name}: {text!r} is not an expression ({error.msg})") from None
    _check(tree, set(variables), name, text)

    def function(*arrays):
        values = dict(zip(variables, (np.asarray(a, dtype=float) for a in arrays)))
        return np.asarray(_value(tree, values), dtype=float) + np.zeros(np.broadcast_shapes(
            *(np.shape(a) for a in arrays)))

    return function


def _check(node: ast.AST, variables: set[str], name: str, text: str) -> None:
    def refuse(what: str):
        allowed = ", ".join(sorted(variables | set(CONSTANTS) | set(FUNCTIONS)))
        raise ValueError(f"{name}: {what} is not allowed in {text!r} (numbers, + - * / **, comparisons and {allowed})")

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            refuse(repr(node.value))
    elif isinstance(node, ast.Name):
        if node.id not in variables and node.id not in CONSTANTS:
            refuse(f"the name {node.id!r}")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            refuse(f"the operator {type(node.op).__name__}")
        _check(node.left, variables, name, text)
        _check(node.right, variables, name, text)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            refuse(f"the operator {type(node.op).__name__}")
        _check(node.operand, variables, name, text)
    elif isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            refuse("a chained or equality comparison")
        _check(node.left, variables, name, text)
        _check(node.comparators[0], variables, name, text)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            refuse(f"the call {ast.unparse(node.func)}(...)")
        for argument in node.args:
            _check(argument, variables, name, text)
    else:
        refuse(f"{type(node).__name__} ({ast.unparse(node)!r})")


def _value(node: ast.AST, values: dict[str, np.ndarray]):
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return values[node.id] if node.id in values else CONSTANTS[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_value(node.left, values), _value(node.right, values))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_value(node.operand, values))
    if isinstance(node, ast.Compare):
        return _COMPARE[type(node.ops[0])](_value(node.left, values), _value(node.comparators[0], values)).astype(float)
    return FUNCTIONS[node.func.id](*(_value(argument, values) for argument in node.args))
