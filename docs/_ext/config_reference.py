"""``.. config-reference:: CLASS``: the keys of a config section, generated from its dataclass.

Each key of a config is an :func:`validation.app.config.option` field whose metadata carry its
TOML types, default, range, choices and meaning; the same metadata drive the checks. This
directive prints them as tables (one per table of the TOML file), so the reference cannot drift
from what the program accepts.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path
from dataclasses import MISSING

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

TYPE_NAMES = {"bool": "boolean", "int": "integer", "str": "string", "list": "array", "tuple": "array",
              "dict": "table", "Real": "number"}


def _class(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _is_section(types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    return any(dataclasses.is_dataclass(t) and hasattr(t, "PREFIX") and t.PREFIX.endswith(".") for t in types)


def _types(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    names = []
    for t in types:
        name = TYPE_NAMES.get(t.__name__, "table" if dataclasses.is_dataclass(t) else t.__name__)
        if name not in names:
            names.append(name)
    return " or ".join(names)


def _default(spec) -> str:
    if spec.default is MISSING:
        return "required"
    if spec.default is None:
        return "unset"
    value = spec.default
    if isinstance(value, bool):
        return "``true``" if value else "``false``"
    if isinstance(value, tuple):
        value = list(value)
    return f"``{value!r}``".replace("'", '"')


def _allowed(spec) -> str:
    rule = spec.metadata
    if rule.get("choices"):
        return ", ".join(f'``"{c}"``' for c in rule["choices"])
    if rule.get("minimum") is not None:
        return (">" if rule.get("strict") else ">=") + f" {rule['minimum']:g}"
    return ""


def _applies(cls, name: str) -> str:
    kinds = getattr(cls, "KEYS", None)
    if not kinds or name == "kind":
        return ""
    users = [kind for kind, keys in kinds.items() if name in keys]
    return "only with kind " + ", ".join(f'``"{k}"``' for k in users) if len(users) < len(kinds) else ""


def section_rst(cls, title: str) -> list[str]:
    """A list-table of the keys of one section; sub-sections follow as their own tables."""
    rows, nested = [], []
    for spec in dataclasses.fields(cls):
        rule = spec.metadata
        if not rule or not rule["in_toml"]:
            continue
        if _is_section(rule["types"]):
            nested.append(rule["types"] if not isinstance(rule["types"], tuple) else rule["types"][0])
            if spec.name != "times":  # the one section that can also be an array
                continue
        # the help is plain text: a "|k|" would be a substitution in reStructuredText, a "*" emphasis
        text = rule.get("help", "").replace("|", "\\|").replace("*", "\\*")
        meaning = "; ".join(filter(None, [text, _applies(cls, spec.name)]))
        rows.append([f"``{spec.name}``", _types(rule["types"]), _default(spec), _allowed(spec), meaning])
    lines = [f".. py:currentmodule:: {cls.__module__}", "", f".. rubric:: {title}", "",
             (cls.__doc__ or "").strip().splitlines()[0], "",
             ".. list-table::", "   :header-rows: 1", "   :widths: 16 12 12 20 40", "",
             "   * - key", "     - type", "     - default", "     - allowed", "     - meaning"]
    for row in rows:
        lines.append(f"   * - {row[0]}")
        lines.extend(f"     - {cell}" for cell in row[1:])
    lines.append("")
    for sub in nested:
        lines.extend(section_rst(sub, f"[{sub.PREFIX[:-1]}]"))
    return lines


class ConfigReference(SphinxDirective):
    required_arguments = 1
    optional_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        cls = _class(self.arguments[0])
        title = self.arguments[1] if len(self.arguments) > 1 else "top level"
        # The tables come from Python sources, not from this page: a change there must re-read it.
        for source in Path(inspect.getsourcefile(cls)).parent.glob("*.py"):
            self.env.note_dependency(str(source))
        container = nodes.container()
        self.state.nested_parse(StringList(section_rst(cls, title), source="config-reference"),
                                self.content_offset, container)
        return container.children


def setup(app):
    app.add_directive("config-reference", ConfigReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
