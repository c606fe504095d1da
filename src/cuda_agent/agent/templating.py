"""Prompt and file templates: text files in ``agent/templates/`` with ``{{ name }}`` holes.

Rendering fails loudly: a hole without a value raises :class:`TemplateError` naming the
template and the variable, and so does a value nobody asked for (a typo in a caller).
Only ``{{ identifier }}`` is special, so C++, CUDA and Jinja-free text pass through as is.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
HOLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class TemplateError(KeyError):
    """A template that cannot be rendered with the values given."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


@cache
def load_template(name: str) -> str:
    path = TEMPLATE_DIR / name
    if not path.is_file():
        raise TemplateError(f"no template {name!r} in {TEMPLATE_DIR}")
    return path.read_text()


def holes(text: str) -> set[str]:
    return set(HOLE.findall(text))


def render_text(text: str, values: dict[str, object], origin: str = "<template>") -> str:
    wanted = holes(text)
    missing = sorted(wanted - values.keys())
    if missing:
        raise TemplateError(f"{origin}: no value for {', '.join(missing)}")
    unused = sorted(values.keys() - wanted)
    if unused:
        raise TemplateError(f"{origin}: values given for {', '.join(unused)}, which it does not use")
    return HOLE.sub(lambda m: str(values[m.group(1)]), text)


def render(name: str, **values: object) -> str:
    """Render ``templates/<name>`` with ``values``; every hole must be filled, every value used."""
    return render_text(load_template(name), values, origin=name)
