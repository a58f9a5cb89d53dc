"""Metadata filters for search: one small grammar, parsed once, run by either store.

    start >= 30 and end <= 90
    split == "test" or dataset in ["msrvtt", "vatex"]
    path startswith "lectures/2024/" and not (duration < 10)
    tags contains "keynote"

Grammar (keywords are lower case; strings in double or single quotes, ``\\`` escapes the next
character)::

    filter     := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | "(" filter ")" | comparison
    comparison := FIELD ("==" | "=" | "!=" | "<" | "<=" | ">" | ">=") VALUE
                | FIELD "in" "[" VALUE ("," VALUE)* "]"
                | FIELD "startswith" STRING          (a path prefix)
                | FIELD "contains" VALUE             (a list field holds the value: tags)
    VALUE      := NUMBER | STRING | true | false

`parse_filter` returns a tree that `to_milvus` turns into a Milvus boolean expression (the
Milvus store passes it to the engine) and `matches` evaluates on one entry's metadata (the
FAISS store over-fetches and keeps the entries that match). A malformed filter raises one
`VideoTextError` naming the filter, the position and what was expected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

from videotext.errors import VideoTextError

COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
# the metadata fields every entry carries (search.index entries); list fields take `contains`
FIELDS = ("path", "video_id", "start", "end", "duration", "hash", "dataset", "split", "tags")
LIST_FIELDS = ("tags",)
_TOKEN = re.compile(r"""\s*(?:(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\w.])|(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')"""
                    r"""|(?P<op>==|!=|<=|>=|<|>|=|\(|\)|\[|\]|,)|(?P<word>[A-Za-z_][A-Za-z0-9_]*))""")


@dataclass(frozen=True)
class Compare:
    field: str
    op: str  # one of COMPARISONS, "in", "startswith", "contains"
    value: Any  # a number, string or bool; a tuple of them for "in"


@dataclass(frozen=True)
class Not:
    inner: "Node"


@dataclass(frozen=True)
class Both:
    op: str  # "and" | "or"
    parts: tuple["Node", ...]


Node = Union[Compare, Not, Both]


class FilterError(VideoTextError):
    """A filter that does not follow the grammar of `videotext.search.filters`."""


def parse_filter(text: str, fields: Sequence[str] = FIELDS) -> Node:
    """The tree of filter `text`; FilterError naming the position when it does not parse."""
    return _Parser(text, tuple(fields)).parse()


class _Parser:
    def __init__(self, text: str, fields: tuple[str, ...]):
        self.text, self.fields = text, fields
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        position = 0
        while position < len(text):
            if text[position:].strip() == "":
                break
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise self.error(position + len(text[position:]) - len(text[position:].lstrip()), "an unexpected character")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            position = match.end()
        self.index = 0

    def error(self, position: int, problem: str) -> FilterError:
        return FilterError(f"filter {self.text!r}, character {position + 1}: {problem}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self, what: str = "more", literal: str | None = None) -> tuple[str, str, int]:
        """The next token: any (described as `what` in errors), or exactly `literal`."""
        token = self.peek()
        if token is None:
            raise self.error(len(self.text), f"expected {what if literal is None else repr(literal)} but the filter ends")
        if literal is not None and token[1] != literal:
            raise self.error(token[2], f"expected {literal!r}, got {token[1]!r}")
        self.index += 1
        return token

    def parse(self) -> Node:
        if not self.tokens:
            raise FilterError(f"filter {self.text!r}: empty; write e.g. start >= 30 and split == \"test\"")
        node = self.disjunction()
        if self.peek() is not None:
            raise self.error(self.peek()[2], f"expected 'and', 'or' or the end, got {self.peek()[1]!r}")
        return node

    def disjunction(self) -> Node:
        parts = [self.conjunction()]
        while self.peek() and self.peek()[1] == "or":
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else Both("or", tuple(parts))

    def conjunction(self) -> Node:
        parts = [self.negation()]
        while self.peek() and self.peek()[1] == "and":
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else Both("and", tuple(parts))

    def negation(self) -> Node:
        token = self.peek()
        if token and token[1] == "not":
            self.take()
            return Not(self.negation())
        if token and token[1] == "(":
            self.take()
            node = self.disjunction()
            self.take(literal=")")
            return node
        return self.comparison()

    def comparison(self) -> Node:
        kind, name, position = self.take("a field")
        if kind != "word" or name in ("and", "or", "not", "in", "startswith", "contains", "true", "false"):
            raise self.error(position, f"expected a field ({', '.join(self.fields)}), got {name!r}")
        if name not in self.fields:
            raise self.error(position, f"unknown field {name!r}; known: {', '.join(self.fields)}")
        _, op, op_position = self.take("a comparison")
        if op == "=":
            op = "=="
        if op in COMPARISONS:
            value = self.value()
            if op not in ("==", "!=") and isinstance(value, bool):
                raise self.error(op_position, f"{op} needs a number or a string, not a boolean")
            return Compare(name, op, value)
        if op == "in":
            self.take(literal="[")
            values = [self.value()]
            while self.peek() and self.peek()[1] == ",":
                self.take()
                values.append(self.value())
            self.take(literal="]")
            return Compare(name, "in", tuple(values))
        if op == "startswith":
            value = self.value()
            if not isinstance(value, str):
                raise self.error(op_position, "startswith needs a string")
            return Compare(name, "startswith", value)
        if op == "contains":
            if name not in LIST_FIELDS:
                raise self.error(op_position, f"contains applies to a list field ({', '.join(LIST_FIELDS)})")
            return Compare(name, "contains", self.value())
        raise self.error(op_position, f"expected one of {', '.join(COMPARISONS)}, in, startswith, contains; got {op!r}")

    def value(self) -> Any:
        kind, text, position = self.take("a value")
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "string":
            return re.sub(r"\\(.)", r"\1", text[1:-1])
        if kind == "word" and text in ("true", "false"):
            return text == "true"
        raise self.error(position, f"expected a number, a quoted string, true or false, got {text!r}")


def matches(node: Node, meta: Mapping[str, Any]) -> bool:
    """Whether an entry with metadata `meta` passes the filter.

    A comparison on a field the entry lacks (None: a whole video has no `start`) is unknown,
    and unknown propagates as in SQL and Milvus: `not` keeps it unknown, `and` / `or` decide
    only when the other side does. Only a known true passes."""
    return _truth(node, meta) is True


def fields_of(node: Node) -> set[str]:
    """The fields a filter names."""
    if isinstance(node, Both):
        return set().union(*(fields_of(part) for part in node.parts))
    if isinstance(node, Not):
        return fields_of(node.inner)
    return {node.field}


def _truth(node: Node, meta: Mapping[str, Any]) -> bool | None:
    """True, False, or None for unknown (three-valued logic)."""
    if isinstance(node, Both):
        values = [_truth(part, meta) for part in node.parts]
        decisive, other = (False, True) if node.op == "and" else (True, False)
        if decisive in values:
            return decisive
        return other if all(v is other for v in values) else None
    if isinstance(node, Not):
        inner = _truth(node.inner, meta)
        return None if inner is None else not inner
    value = meta.get(node.field)
    if value is None:
        return None
    if node.op == "in":
        return value in node.value
    if node.op == "startswith":
        return isinstance(value, str) and value.startswith(node.value)
    if node.op == "contains":
        return node.value in value
    if isinstance(value, str) != isinstance(node.value, str):
        return False  # a number compared with a string
    if node.op == "==":
        return value == node.value
    if node.op == "!=":
        return value != node.value
    return _order(value, node.op, node.value)


def _order(value: Any, op: str, other: Any) -> bool:
    return {"<": value < other, "<=": value <= other, ">": value > other, ">=": value >= other}[op]


def to_milvus(node: Node) -> str:
    """The Milvus boolean expression of a filter (strings quoted, a prefix as `like "p%"`)."""
    if isinstance(node, Both):
        return "(" + f" {node.op} ".join(to_milvus(part) for part in node.parts) + ")"
    if isinstance(node, Not):
        return f"(not {to_milvus(node.inner)})"
    if node.op == "in":
        return f"{node.field} in [{', '.join(_literal(v) for v in node.value)}]"
    if node.op == "startswith":
        # LIKE's own escapes first (a backslash before a backslash, % or _), then the string literal's
        pattern = node.value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        return f"{node.field} like {_literal(pattern)}"
    if node.op == "contains":
        return f"array_contains({node.field}, {_literal(node.value)})"
    return f"{node.field} {node.op} {_literal(node.value)}"


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def entry_fields(entry: Any) -> dict[str, Any]:
    """The fields a filter sees of an index entry: its metadata (duration, hash, dataset, split,
    tags, anything a manifest added) under its own path, video id and clip times."""
    return {**entry.meta, "path": entry.path, "video_id": entry.video_id, "start": entry.start, "end": entry.end}
