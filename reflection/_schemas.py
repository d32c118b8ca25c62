"""What a parameters schema says beyond its validator's yes or no, computed once per schema.

- `draft_of`: the draft a schema is read in. `$schema` decides when it names a known draft;
  without it, draft 2020-12, unless the schema uses a form only draft 7 has (array `items`,
  `additionalItems`, `definitions`, `dependencies`, a `$ref` to the draft-7 metaschema) and
  none that only 2019-09 / 2020-12 has (`$defs`, `prefixItems`, `dependentRequired`,
  `dependentSchemas`, `unevaluated*`, `$anchor`, `$dynamic*`, `$recursive*`, `min/maxContains`).
- `names_at`: the argument names a schema defines for the object it validates, following
  every reference the validator follows (`$ref` by JSON pointer, `$anchor`, `$id`-relative and
  absolute URIs within the document, `$dynamicRef` / `$recursiveRef`, the metaschemas) and
  every in-place branch (`allOf`, `anyOf`, `oneOf`, `not`, `if` / `then` / `else`,
  `dependentSchemas`, `dependencies`); names in `required`, `dependentRequired` and
  `dependencies` are defined too. Whether any name goes: `additionalProperties` or
  `unevaluatedProperties` that is not false, a reference that cannot be resolved here, or
  neither `properties` / `patternProperties` nor a false `additionalProperties` /
  `unevaluatedProperties` / `propertyNames` anywhere (JSON Schema then accepts any name).
- `expansion`: the most subschemas the validator may evaluate at one place of a value, so a
  schema whose references multiply (each level referring to the next twice) is refused before
  it costs exponential time; and in-place cycles, which never reach a check.

Pure functions over JSON data: no validator, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urljoin

DRAFT4, DRAFT6, DRAFT7, DRAFT2019, DRAFT2020 = "4", "6", "7", "2019-09", "2020-12"
_LEGACY = frozenset({DRAFT4, DRAFT6, DRAFT7})
"""Drafts in which `$ref` makes its siblings ignored, and `$id: "#name"` is an anchor."""

_DRAFTS = {
    "http://json-schema.org/draft-04/schema": DRAFT4,
    "http://json-schema.org/draft-06/schema": DRAFT6,
    "http://json-schema.org/draft-07/schema": DRAFT7,
    "https://json-schema.org/draft/2019-09/schema": DRAFT2019,
    "https://json-schema.org/draft/2020-12/schema": DRAFT2020,
}
_METASCHEMAS = frozenset(
    {
        *_DRAFTS,
        *(
            f"https://json-schema.org/draft/{d}/meta/{v}"
            for d in ("2019-09", "2020-12")
            for v in (
                "core",
                "applicator",
                "validation",
                "meta-data",
                "format",
                "format-annotation",
                "format-assertion",
                "content",
                "unevaluated",
            )
        ),
    }
)
_KEYWORDS = frozenset(
    {
        "$anchor",
        "$comment",
        "$defs",
        "$dynamicAnchor",
        "$dynamicRef",
        "$id",
        "$recursiveAnchor",
        "$recursiveRef",
        "$ref",
        "$schema",
        "$vocabulary",
        "additionalItems",
        "additionalProperties",
        "allOf",
        "anyOf",
        "const",
        "contains",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
        "default",
        "definitions",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
        "deprecated",
        "description",
        "else",
        "enum",
        "examples",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "format",
        "id",
        "if",
        "items",
        "maxContains",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minContains",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "multipleOf",
        "not",
        "oneOf",
        "pattern",
        "patternProperties",
        "prefixItems",
        "properties",
        "propertyNames",
        "readOnly",
        "required",
        "then",
        "title",
        "type",
        "unevaluatedItems",
        "unevaluatedProperties",
        "uniqueItems",
        "writeOnly",
    }
)
"""The property names the metaschemas define (none forbids others): what a `$ref` to one defines."""

_DRAFT7_ONLY = ("additionalItems", "definitions", "dependencies")
_MODERN_ONLY = frozenset(
    {
        "$defs",
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "minContains",
        "maxContains",
    }
)

# Where subschemas sit, by keyword: in place (applied to the same value), on an object's members,
# on an array's items, or held (applied only where referred to). "one" holds a subschema, "list"
# a list of them, "map" an object of them.
_PLACE, _PROPERTY, _MEMBER, _ITEM, _ITEM_EXTRA, _HELD = range(6)
_ROLES: dict[str, tuple[int, str]] = {
    "not": (_PLACE, "one"),
    "if": (_PLACE, "one"),
    "then": (_PLACE, "one"),
    "else": (_PLACE, "one"),
    "allOf": (_PLACE, "list"),
    "anyOf": (_PLACE, "list"),
    "oneOf": (_PLACE, "list"),
    "dependentSchemas": (_PLACE, "map"),
    "dependencies": (_PLACE, "map"),  # `dependencies`: its schema values
    "properties": (_PROPERTY, "map"),
    "patternProperties": (_MEMBER, "map"),
    "additionalProperties": (_MEMBER, "one"),
    "unevaluatedProperties": (_MEMBER, "one"),
    "propertyNames": (_MEMBER, "one"),
    "items": (_ITEM, "one"),
    "prefixItems": (_ITEM, "list"),  # `items` may be a list (draft 7)
    "additionalItems": (_ITEM_EXTRA, "one"),
    "unevaluatedItems": (_ITEM_EXTRA, "one"),
    "contains": (_ITEM_EXTRA, "one"),
    "$defs": (_HELD, "map"),
    "definitions": (_HELD, "map"),
    "contentSchema": (_HELD, "one"),
}
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas", "dependencies")
_IDENTIFIERS = (b'"$id"', b'"id"', b'"$anchor"', b'"$dynamicAnchor"', b'"$recursiveAnchor"')


def _entries(node: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """(role, subschema) for every subschema of `node`; values that cannot be subschemas (a
    `dependencies` list of names, a string) are left out."""
    for key, value in node.items():
        found = _ROLES.get(key)
        if found is None:
            continue
        role, shape = found
        if shape == "one":
            if isinstance(value, dict) or value is True or value is False:
                yield role, value
            elif key == "items" and isinstance(value, list):
                yield from ((role, sub) for sub in value if isinstance(sub, (dict, bool)))
        elif shape == "list":
            if isinstance(value, list):
                yield from ((role, sub) for sub in value if isinstance(sub, (dict, bool)))
        elif isinstance(value, dict):
            yield from ((role, sub) for sub in value.values() if isinstance(sub, (dict, bool)))


def _paths(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(pointer path, subschema) for every subschema of `node` (for messages)."""
    for key, value in node.items():
        found = _ROLES.get(key)
        if found is None:
            continue
        if isinstance(value, list):
            yield from ((f"{key}/{i}", sub) for i, sub in enumerate(value))
        elif found[1] == "map" and isinstance(value, dict):
            yield from ((f"{_escape(key)}/{_escape(name)}", sub) for name, sub in value.items())
        else:
            yield _escape(key), value


_REFS = ("$ref", "$dynamicRef", "$recursiveRef")

_ROOT = "urn:reflection:root"
"""The base URI of a schema without `$id` (any absolute URI that no schema uses would do)."""
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")

MAX_EXPANSION = 10_000
"""Subschemas the validator may evaluate at one place of a value. A schema that can need more
(references that multiply, level after level) is an `invalid_api_spec`: it would cost
exponential time on a small value. It bounds a row's validation to this many subschema
evaluations per value in the arguments (real tool schemas stay in the tens or hundreds)."""
MAX_DEPTH = 100
"""Nesting levels of an argument value (deeper values are bad input before any schema runs)."""


# --- drafts --------------------------------------------------------------------------------


def declared_draft(schema: dict[str, Any]) -> str | None:
    """The draft `$schema` names, or None (absent, or a URI this module does not know)."""
    declared = schema.get("$schema")
    if not isinstance(declared, str):
        return None
    return _DRAFTS.get(declared.removesuffix("#"))


def draft_of(schema: dict[str, Any], hint: bytes | None = None) -> str:
    """The draft `schema` is read in (see the module's docstring). `hint`: the schema's
    canonical JSON, to skip the walk when no draft-7-only keyword occurs in it at all."""
    declared = declared_draft(schema)
    if declared is not None:
        return declared
    if isinstance(schema.get("$schema"), str):
        return DRAFT2020  # an unknown metaschema: the validator decides; names read as 2020-12
    if hint is not None and not any(
        k in hint
        for k in (b'"items":[', b'"additionalItems"', b'"definitions"', b'"dependencies"', b"json-schema.org/draft-0")
    ):
        return DRAFT2020
    old = modern = False
    for node in _walk(schema):
        if isinstance(node.get("items"), list) or any(k in node for k in _DRAFT7_ONLY):
            old = True
        ref = node.get("$ref")
        if isinstance(ref, str) and _DRAFTS.get(ref.partition("#")[0]) in _LEGACY:
            old = True  # refers to the draft-7 (or older) metaschema
        if not modern and not _MODERN_ONLY.isdisjoint(node):
            modern = True
    return DRAFT7 if old and not modern else DRAFT2020


def _walk(root: Any) -> Iterator[dict[str, Any]]:
    """Every object subschema of `root` once, wherever it sits."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(sub for _, sub in _entries(node))


# --- the document: its resources, anchors and references ----------------------------------


_META: Any = object()
"""What a reference to one of the metaschemas resolves to."""


class Document:
    """A schema document indexed as a validator resolves references in it: its resources
    (`$id`), anchors (`$anchor`, `$dynamicAnchor`, a draft-7 `$id: "#name"`) and the base
    URI in force in each subschema."""

    def __init__(self, root: Any, draft: str, hint: bytes | None = None):
        self.root = root
        self.draft = draft
        self.resources: dict[str, Any] = {_ROOT: root}
        self.anchors: dict[str, Any] = {}
        self.dynamic: dict[str, list[Any]] = {}
        self.recursive: list[Any] = []
        self.base: dict[int, str] = {}
        if hint is not None and not any(key in hint for key in _IDENTIFIERS):
            return  # no identifier anywhere: every subschema has the root's base, refs are pointers
        id_key = "id" if draft == DRAFT4 else "$id"
        legacy = draft in _LEGACY
        seen: set[int] = set()
        stack: list[tuple[Any, str]] = [(root, _ROOT)]
        while stack:
            node, base = stack.pop()
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            ident = node.get(id_key)
            if isinstance(ident, str) and not (legacy and "$ref" in node):
                document, fragment = _split(_join(base, ident))
                if not ident.startswith("#"):
                    base = document
                    self.resources.setdefault(document, node)
                if fragment and not fragment.startswith("/") and legacy:
                    self.anchors.setdefault(f"{document}#{fragment}", node)
            if not legacy:
                anchor = node.get("$anchor")
                if isinstance(anchor, str):
                    self.anchors.setdefault(f"{base}#{anchor}", node)
                dynamic = node.get("$dynamicAnchor")
                if isinstance(dynamic, str):
                    self.anchors.setdefault(f"{base}#{dynamic}", node)
                    self.dynamic.setdefault(dynamic, []).append(node)
                if node.get("$recursiveAnchor") is True:
                    self.recursive.append(node)
            if base != _ROOT:
                self.base[id(node)] = base
            stack.extend((sub, base) for _, sub in _entries(node))

    def base_of(self, node: Any) -> str:
        return self.base.get(id(node), _ROOT)

    def label(self, node: Any) -> str:
        """Where `node` sits in the document, as a JSON pointer (for messages; walks the document)."""
        seen: set[int] = set()
        stack: list[tuple[Any, str]] = [(self.root, "#")]
        while stack:
            here, where = stack.pop()
            if here is node:
                return where
            if isinstance(here, dict) and id(here) not in seen:
                seen.add(id(here))
                stack.extend((sub, f"{where}/{path}") for path, sub in _paths(here))
        return "#"

    def targets(self, node: dict[str, Any], keyword: str) -> list[Any] | None:
        """What `node[keyword]` (a reference keyword) may lead to: the node itself, or
        `_META`; every candidate for a dynamic reference; None when it cannot be resolved."""
        ref = node[keyword]
        if not isinstance(ref, str):
            return []
        found = self.resolve(ref, self.base_of(node))
        if keyword == "$ref":
            return None if found is None else [found]
        out = [] if found is None else [found]
        if keyword == "$dynamicRef":
            fragment = ref.partition("#")[2]
            out.extend(self.dynamic.get(fragment, ()) if fragment and not fragment.startswith("/") else ())
        else:
            out.extend(self.recursive)
        return out or None

    def resolve(self, ref: str, base: str) -> Any:
        """The subschema `ref` names from a subschema whose base URI is `base`, `_META`, or None."""
        document, fragment = _split(_join(base, ref))
        target = self.resources.get(document)
        if target is None:
            return _META if document in _METASCHEMAS else None
        if not fragment:
            return target
        if fragment.startswith("/"):
            return _pointer(target, unquote(fragment))
        return self.anchors.get(f"{document}#{fragment}")


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _join(base: str, ref: str) -> str:
    if _SCHEME.match(ref):
        return ref
    if ref.startswith("#"):
        return base + ref
    return urljoin(base, ref)


def _split(uri: str) -> tuple[str, str]:
    document, _, fragment = uri.partition("#")
    return document, fragment


def _pointer(node: Any, pointer: str) -> Any:
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def has_references(hint: bytes) -> bool:
    """Whether a schema's canonical JSON may hold a reference (a cheap pre-check)."""
    return b'"$ref"' in hint or b'Ref"' in hint


# --- names ---------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Names:
    """The argument names a schema defines for the object it validates."""

    names: tuple[str, ...]
    """Defined names, the schema's own `properties` first, in its order."""
    patterns: tuple[str, ...]
    """`patternProperties` regexes (and `propertyNames` patterns): matching names are defined."""
    open: bool
    """Any name goes."""


def names_at(document: Document | None, root: Any, start: Any, draft: str) -> Names:
    """The names `start` (a subschema of `root`) defines for the object it validates.
    `document`: `root`'s index, or None to build it when a reference is met."""
    names: dict[str, None] = {}
    patterns: list[str] = []
    is_open = False
    shaped = False  # met `properties` or `patternProperties`
    closed = False  # met `additionalProperties: false` or the like: no name goes unless defined
    legacy = draft in _LEGACY
    seen: set[int] = set()
    stack = [start]
    while stack:
        node = stack.pop()
        if node is _META:
            names.update(dict.fromkeys(sorted(_KEYWORDS)))
            shaped = True
            continue
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        refs = [key for key in _REFS if key in node]
        if refs:
            if document is None:
                document = Document(root, draft)
            for key in refs:
                found = document.targets(node, key)
                if found is None:
                    is_open = True  # treated as open rather than guessed
                else:
                    stack.extend(reversed(found))
            if legacy and "$ref" in node:
                continue  # draft 7 and before ignore a $ref's siblings
        properties = node.get("properties")
        if isinstance(properties, dict):
            shaped = True
            names.update(dict.fromkeys(properties))
        pattern_properties = node.get("patternProperties")
        if isinstance(pattern_properties, dict):
            shaped = True
            patterns.extend(p for p in pattern_properties if isinstance(p, str))
        for key in ("additionalProperties", "unevaluatedProperties"):
            if key in node:
                if node[key] is False:
                    closed = True
                else:
                    is_open = True
        if node.get("propertyNames") is False:
            closed = True
        _required_names(node, names)
        for key in _IN_PLACE_MANY:
            if isinstance(node.get(key), list):
                stack.extend(reversed(node[key]))
        for key in _IN_PLACE_ONE:
            if key in node:
                stack.append(node[key])
        for key in _IN_PLACE_MAP:
            value = node.get(key)
            if isinstance(value, dict):
                stack.extend(sub for sub in value.values() if isinstance(sub, (dict, bool)))
    return Names(names=tuple(names), patterns=tuple(patterns), open=is_open or not (shaped or closed))


def _required_names(node: dict[str, Any], names: dict[str, None]) -> None:
    """Names a schema requires or constrains by name: `required`, `dependentRequired`,
    `dependencies`, `dependentSchemas` (keys), `propertyNames` (`const` / `enum`), and the
    keys of an object `const` / `enum` member."""
    required = node.get("required")
    if isinstance(required, list):
        names.update(dict.fromkeys(n for n in required if isinstance(n, str)))
    for key in ("dependentRequired", "dependencies", "dependentSchemas"):
        value = node.get(key)
        if isinstance(value, dict):
            names.update(dict.fromkeys(value))
            for sub in value.values():
                if isinstance(sub, list):
                    names.update(dict.fromkeys(n for n in sub if isinstance(n, str)))
    allowed = node.get("propertyNames")
    if isinstance(allowed, dict):
        if isinstance(allowed.get("const"), str):
            names[allowed["const"]] = None
        if isinstance(allowed.get("enum"), list):
            names.update(dict.fromkeys(n for n in allowed["enum"] if isinstance(n, str)))
    if isinstance(node.get("const"), dict):
        names.update(dict.fromkeys(node["const"]))
    if isinstance(node.get("enum"), list):
        for member in node["enum"]:
            if isinstance(member, dict):
                names.update(dict.fromkeys(member))


# --- expansion -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Node:
    """One subschema, with its edges: in place, and per member slot."""

    node: Any
    place: list[int]
    """In-place subschemas (references resolved), each evaluated on the same value."""
    choices: list[list[int]]
    """Dynamic references: one of each list is evaluated."""
    properties: list[int]
    """Subschemas of which at most one applies to one member (`properties`)."""
    members: list[int]
    """Subschemas each of which may apply to the same object member."""
    items: list[int]
    """Subschemas of which at most one applies to one array item (`prefixItems`, `items`)."""
    item_extras: list[int]
    """Subschemas each of which may apply to the same array item."""


def expansion(root: dict[str, Any], draft: str, document: Document | None) -> tuple[int, str | None]:
    """(the most subschema evaluations one place of a value may need, capped at
    MAX_EXPANSION + 1; where an in-place cycle runs, or None).

    First an upper bound: with no cycle at all, the size of the schema with every reference
    written out, which is enough for almost every schema. Otherwise, per subschema and depth
    d, the evaluations at one member d levels down, the worst member chosen: in-place
    subschemas add up (a dynamic reference counts its costliest candidate), and one level
    down an object's member meets at most one `properties` subschema plus every other member
    subschema, an array's item one of `prefixItems` / `items` plus the others."""
    cap = MAX_EXPANSION + 1
    if document is None:
        document = Document(root, draft)
    bound = _written_out(root, draft, document, cap)
    if bound is not None and bound < cap:
        return bound, None
    graph, document = _graph(root, draft, document)
    order, loop = _in_place_order(graph)
    if loop is not None:
        assert document is not None  # a cycle needs a reference
        return cap, " -> ".join(document.label(graph[i].node) for i in loop)
    here = [0] * len(graph)
    for i in order:  # depth 0: the subschemas evaluated on the value itself
        entry = graph[i]
        here[i] = min(
            cap, 1 + sum(here[j] for j in entry.place) + sum(max(here[j] for j in choice) for choice in entry.choices)
        )
    # Deeper, only subschemas that reach a member subschema in place can count anything.
    reaches = [False] * len(graph)
    for i in order:
        entry = graph[i]
        reaches[i] = (
            bool(entry.properties or entry.members or entry.items or entry.item_extras)
            or any(reaches[j] for j in entry.place)
            or any(reaches[j] for choice in entry.choices for j in choice)
        )
    steps = [(i, graph[i]) for i in order if reaches[i]]
    worst = here[0]
    below = here
    seen: set[tuple[int, ...]] = set()
    for _ in range(MAX_DEPTH):
        if worst >= cap or not reaches[0]:
            break
        # The value here is an object, or an array: only that kind's member subschemas apply.
        objects = [0] * len(graph)
        arrays = [0] * len(graph)
        for i, entry in steps:
            on_object = max((below[j] for j in entry.properties), default=0) + sum(below[j] for j in entry.members)
            on_array = max((below[j] for j in entry.items), default=0) + sum(below[j] for j in entry.item_extras)
            for level, down in ((objects, on_object), (arrays, on_array)):
                level[i] = min(
                    cap,
                    down
                    + sum(level[j] for j in entry.place)
                    + sum(max(level[j] for j in choice) for choice in entry.choices),
                )
        level = [max(a, b) for a, b in zip(objects, arrays, strict=True)]
        worst = max(worst, level[0])
        key = tuple(level)
        if not any(level) or key in seen:
            break  # nothing deeper, or the depths from here on repeat ones already seen
        seen.add(key)
        below = level
    return min(worst, cap), None


def _written_out(root: Any, draft: str, document: Document, cap: int) -> int | None:
    """The number of subschemas with every reference written out (each use a copy), capped;
    None when the references run in a cycle. It bounds the evaluations at one place."""
    legacy = draft in _LEGACY
    size: dict[int, int] = {}
    visiting = {id(root)}
    frames: list[list[Any]] = [[root, _kids(root, document, legacy), 0, 1]]
    while frames:
        frame = frames[-1]
        kids = frame[1]
        while frame[2] < len(kids):
            kid = kids[frame[2]]
            frame[2] += 1
            key = id(kid)
            if key in size:
                frame[3] += size[key]
            elif key in visiting:
                return None
            else:
                visiting.add(key)
                frames.append([kid, _kids(kid, document, legacy), 0, 1])
                break
        else:
            frames.pop()
            key = id(frame[0])
            visiting.discard(key)
            size[key] = total = min(cap, frame[3])
            if frames:
                frames[-1][3] += total
    return size[id(root)]


def _kids(node: Any, document: Document, legacy: bool) -> list[Any]:
    """The subschemas evaluated with `node`: its references' targets, and those it holds in
    place or for members (not `$defs`, which apply only where referred to)."""
    if type(node) is not dict:
        return []
    out: list[Any] = []
    for key in _REFS:
        if key in node:
            out.extend(t for t in document.targets(node, key) or () if isinstance(t, (dict, bool)))
            if legacy and key == "$ref":
                return out
    for key, value in node.items():
        found = _ROLES.get(key)
        if found is None or found[0] == _HELD:
            continue
        if type(value) is dict:
            if found[1] == "map":
                out.extend(sub for sub in value.values() if isinstance(sub, (dict, bool)))
            else:
                out.append(value)
        elif type(value) is list and (found[1] == "list" or key == "items"):
            out.extend(sub for sub in value if isinstance(sub, (dict, bool)))
        elif (value is True or value is False) and found[1] == "one":
            out.append(value)
    return out


def _graph(root: dict[str, Any], draft: str, document: Document | None) -> tuple[list[_Node], Document | None]:
    """Every subschema reachable from `root` as it is evaluated, numbered from 0 (the root)."""
    legacy = draft in _LEGACY
    index: dict[int, int] = {}
    graph: list[_Node] = []
    pending: list[Any] = []

    def number(node: Any) -> int:
        key = id(node)
        if key not in index:
            index[key] = len(graph)
            graph.append(_Node(node, [], [], [], [], [], []))
            pending.append(node)
        return index[key]

    number(root)
    while pending:
        node = pending.pop()
        entry = graph[index[id(node)]]
        if not isinstance(node, dict):
            continue
        for key in _REFS:
            if key not in node:
                continue
            if document is None:
                document = Document(root, draft)
            found = [t for t in document.targets(node, key) or () if t is not _META and isinstance(t, (dict, bool))]
            if key == "$ref":
                entry.place.extend(number(t) for t in found)
            elif found:
                entry.choices.append([number(t) for t in found])
        if legacy and "$ref" in node:
            continue
        edges = (entry.place, entry.properties, entry.members, entry.items, entry.item_extras, None)
        for role, sub in _entries(node):
            into = edges[role]
            if into is not None:
                into.append(number(sub))
    return graph, document


def _in_place_order(graph: list[_Node]) -> tuple[list[int], list[int] | None]:
    """The subschemas with every in-place subschema before the ones that use it, or the first
    in-place cycle found. A dynamic reference back into the current chain is left out rather
    than called a cycle (which candidate it takes depends on the evaluation's scope)."""
    state = [0] * len(graph)  # 0 new, 1 on the current chain, 2 done
    order: list[int] = []
    for start in range(len(graph)):
        if state[start]:
            continue
        chain = [start]
        edges = [iter(_in_place_edges(graph[start]))]
        state[start] = 1
        while chain:
            step = next(edges[-1], None)
            if step is None:
                done = chain.pop()
                edges.pop()
                state[done] = 2
                order.append(done)
                continue
            target, dynamic = step
            if state[target] == 1:
                if dynamic:
                    continue
                return [], [*chain[chain.index(target) :], target]
            if state[target] == 0:
                state[target] = 1
                chain.append(target)
                edges.append(iter(_in_place_edges(graph[target])))
    return order, None


def _in_place_edges(entry: _Node) -> Iterator[tuple[int, bool]]:
    for j in entry.place:
        yield j, False
    for choice in entry.choices:
        for j in choice:
            yield j, True
