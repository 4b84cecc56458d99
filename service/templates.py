"""Key templates (docs/mirror.md, "Key templates and index keys"): their syntax, the Redis
Cluster hash tag they place keys with, and whether two of them could render the same key. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.sink.derive import Part

__all__ = ["TemplatePart", "may_collide", "parse_template", "segments", "template_tag"]


@dataclass(frozen=True, slots=True)
class TemplatePart:
    text: str  # literal text (braces unescaped), or a column name
    column: bool  # a `{column}` placeholder


def parse_template(template: str, placeholders: bool = True) -> tuple[TemplatePart, ...]:
    """`app:{tenant_id}:user:{id}` -> literal and placeholder parts; `{{`/`}}` are literal braces.
    ValueError (its text is the reason) for a brace that opens or closes nothing, an empty `{}`,
    or two placeholders with no literal text between them (`{a}{b}` cannot be split back)."""
    parts: list[TemplatePart] = []
    literal: list[str] = []
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            literal.append(ch)
            i += 2
        elif ch == "{":
            end = template.find("}", i + 1)
            if end < 0:
                raise ValueError(f"'{{' at offset {i} is not closed (write '{{{{' for a literal brace)")
            name = template[i + 1 : end]
            if not name or "{" in name:
                raise ValueError(f"'{{{name}}}' at offset {i} names no column")
            if literal:
                parts.append(TemplatePart("".join(literal), column=False))
                literal = []
            elif parts and parts[-1].column:
                raise ValueError(
                    f"placeholders {{{parts[-1].text}}}{{{name}}} are adjacent: a placeholder must be "
                    "followed by literal text or the end"
                )
            parts.append(TemplatePart(name, column=True))
            i = end + 1
        elif ch == "}":
            raise ValueError(f"'}}' at offset {i} closes nothing (write '}}}}' for a literal brace)")
        else:
            literal.append(ch)
            i += 1
    if literal:
        parts.append(TemplatePart("".join(literal), column=False))
    if placeholders and not any(p.column for p in parts):
        raise ValueError("has no {column} placeholder")
    if not parts or parts[0].column:
        raise ValueError("must start with literal text (a placeholder's value could name any key)")
    return tuple(parts)


def template_tag(template: str) -> str:
    """The Redis Cluster hash tag of every key `template` renders: the text between its first `{`
    and the next `}`, both literal and before any placeholder (Redis hashes only that pair, so no
    value rendered after it can move a key to another slot; a value's `{` is not escaped).
    ValueError (its text is the reason) for a template whose keys could land in several slots."""
    parts = parse_template(template, placeholders=False)
    lead = parts[0].text  # the literal text before the first placeholder (a template starts with one)
    first = next((p.text for p in parts if p.column), None)
    opening = lead.find("{")
    if opening < 0:
        if any("{" in p.text for p in parts[1:] if not p.column):
            raise ValueError(
                f"has its hash tag after placeholder {{{first}}} (a value holding '{{' would move it)"
            )
        raise ValueError("has no hash tag")
    closing = lead.find("}", opening + 1)
    if closing < 0:
        if first is not None:
            raise ValueError(
                f"has placeholder {{{first}}} inside its hash tag (each value a slot of its own: one "
                "transaction's rows could not be applied in one atomic call)"
            )
        raise ValueError("has no hash tag (its '{' is not closed)")
    if closing == opening + 1:
        raise ValueError("has an empty hash tag {} (Redis then hashes the whole key)")
    return lead[opening + 1 : closing]


def segments(parts: Sequence[Part]) -> list[list[Part]]:
    """A template's `:`-separated parts (a value's `:` is escaped: only literal ones separate)."""
    out: list[list[Part]] = [[]]
    for p in parts:
        if p.field:
            out[-1].append(p)
            continue
        pieces = p.text.split(":")
        for k, piece in enumerate(pieces):
            if k:
                out.append([])
            if piece:
                out[-1].append(Part(piece))
    return out


def may_collide(a: Sequence[Part], b: Sequence[Part]) -> bool:
    """Whether two templates could render the same key: the same number of `:`-parts, and each
    pair of parts could be equal (literal parts equal; with a placeholder, their literal starts
    and ends compatible). Conservative: True when unsure."""
    sa, sb = segments(a), segments(b)
    if len(sa) != len(sb):
        return False
    for x, y in zip(sa, sb, strict=True):
        if all(not p.field for p in x) and all(not p.field for p in y):
            if "".join(p.text for p in x) != "".join(p.text for p in y):
                return False
            continue
        if _only_integer(x) and _literal_not_integer(y) or _only_integer(y) and _literal_not_integer(x):
            return False
        hx, hy = _lead(x), _lead(y)
        tx, ty = _lead(list(reversed(x))), _lead(list(reversed(y)))
        if not (hx.startswith(hy) or hy.startswith(hx)) or not (tx.endswith(ty) or ty.endswith(tx)):
            return False
    return True


def _only_integer(seg: Sequence[Part]) -> bool:
    return len(seg) == 1 and seg[0].integer


def _literal_not_integer(seg: Sequence[Part]) -> bool:
    text = "".join(p.text for p in seg)
    return all(not p.field for p in seg) and not text.lstrip("-").isdigit()


def _lead(parts: Sequence[Part]) -> str:
    out = []
    for p in parts:
        if p.field:
            break
        out.append(p.text)
    return "".join(out)
