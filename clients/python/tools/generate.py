#!/usr/bin/env python3
"""Writes src/quartermaster/_api.py from docs/asyncapi.yaml: a dataclass for
every schema of components.schemas and one method per API operation, so the
Python client says exactly what the document says (which a Rust test keeps
equal to the services' own types).

    generate.py            rewrite _api.py
    generate.py --check    fail (exit 1) if _api.py is not what the document makes
"""

import keyword
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DOCUMENT = HERE.parents[2] / "docs" / "asyncapi.yaml"
OUTPUT = HERE.parent / "src" / "quartermaster" / "_api.py"


def snake(name):
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    return s + "_" if keyword.iskeyword(s) else s


def ref_name(ref):
    prefix = "#/components/schemas/"
    if not ref.startswith(prefix):
        raise SystemExit(f"generate: unsupported reference {ref!r}")
    return ref[len(prefix):]


def nullable(schema):
    """The schema without its null alternative, and whether it had one."""
    if not isinstance(schema, dict):
        return schema, False
    t = schema.get("type")
    if isinstance(t, list) and "null" in t:
        rest = [x for x in t if x != "null"]
        s = dict(schema)
        s["type"] = rest[0] if len(rest) == 1 else rest
        return s, True
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if alts and any(a == {"type": "null"} for a in alts):
            rest = [a for a in alts if a != {"type": "null"}]
            if len(rest) == 1:
                merged = {k: v for k, v in schema.items() if k != key}
                merged.update(rest[0])
                return merged, True
    return schema, False


class Generator:
    def __init__(self, doc):
        self.doc = doc
        self.schemas = doc["components"]["schemas"]
        self.classes = {n for n, s in self.schemas.items() if is_class(s)}

    def kind(self, schema):
        """(python type hint, conversion descriptor) of a property schema."""
        schema, _ = nullable(schema)
        if schema is True or schema == {} or not isinstance(schema, dict):
            return "Any", "any"
        if "$ref" in schema:
            name = ref_name(schema["$ref"])
            if name in self.classes:
                return f'"{name}"', ("model", name)
            return self.kind(self.schemas[name])
        t = schema.get("type")
        if t == "string":
            return "str", "str"
        if t == "integer":
            return "int", "int"
        if t == "number":
            return "float", "float"
        if t == "boolean":
            return "bool", "bool"
        if t == "array":
            items = schema.get("items", True)
            if isinstance(items, list):  # a tuple
                return "list", "any"
            hint, conv = self.kind(items)
            return f"list[{hint.strip(chr(34))}]", ("list", conv)
        if t == "object" or "properties" in schema or "additionalProperties" in schema:
            values = schema.get("additionalProperties", True)
            hint, conv = self.kind(values)
            return f"dict[str, {hint.strip(chr(34))}]", ("dict", conv)
        return "Any", "any"

    def model(self, name, schema):
        required = set(schema.get("required", []))
        lines = [f"@dataclass(kw_only=True)", f"class {name}(Model):"]
        doc = schema.get("description")
        lines.append(f'    """{doc_text(doc or name)}"""')
        lines.append("")
        spec = []
        for prop, sub in schema.get("properties", {}).items():
            attr = snake(prop)
            hint, conv = self.kind(sub)
            _, is_null = nullable(sub)
            if prop in required and not is_null:
                lines.append(f"    {attr}: {hint}")
            elif isinstance(conv, tuple) and conv[0] == "list" and not is_null:
                lines.append(f"    {attr}: {hint} = field(default_factory=list)")
            elif isinstance(conv, tuple) and conv[0] == "dict" and not is_null:
                lines.append(f"    {attr}: {hint} = field(default_factory=dict)")
            else:
                lines.append(f"    {attr}: Optional[{hint}] = None")
            d = sub.get("description") if isinstance(sub, dict) else None
            if d:
                lines.append(f'    """{doc_text(d)}"""')
            spec.append((attr, prop, conv, prop in required))
        lines.append("")
        lines.append(f"    _spec: ClassVar[tuple] = {tuple(spec)!r}")
        return "\n".join(lines)

    def operations(self):
        out = []
        messages = self.doc["components"]["messages"]
        for name, op in self.doc["operations"].items():
            if op.get("channel", {}).get("$ref") != "#/channels/api":
                continue
            request = messages[name]["payload"]
            reply = messages[f"{name}Reply"]["payload"]["properties"]["ok"]
            out.append((name, self.type_of(request), self.type_of(reply)))
        return out

    def type_of(self, schema):
        if isinstance(schema, dict) and "$ref" in schema:
            name = ref_name(schema["$ref"])
            if name in self.classes:
                return name
        return None

    def render(self):
        parts = [HEADER]
        for name, schema in self.schemas.items():
            if name in self.classes:
                parts.append(self.model(name, schema))
            elif isinstance(schema, dict) and "enum" in schema:
                values = tuple(schema["enum"])
                parts.append(f'{name} = str\n"""{doc_text(schema.get("description") or name)}"""\n{snake(name).upper()}_VALUES = {values!r}')
            else:
                parts.append(f"{name} = Any")
        parts.append("MODELS = {" + ", ".join(f'"{n}": {n}' for n in sorted(self.classes)) + "}")
        ops = self.operations()
        parts.append(
            "# Every API operation: (request model, reply model); None: a plain dict.\n"
            "OPERATIONS = {\n"
            + "".join(f'    "{n}": ({q or "None"}, {r or "None"}),\n' for n, q, r in ops)
            + "}"
        )
        methods = ["class Operations:", '    """One method per API operation (docs/asyncapi.yaml), named after it."""', ""]
        for name, req, rep in ops:
            req_hint = req or "dict"
            rep_hint = rep or "dict"
            methods.append(
                f"    async def {snake(name)}(self, request: Optional[{req_hint}] = None, /, **fields: Any) -> {rep_hint}:\n"
                f'        """{name}: the request as a {req_hint} or as its fields (snake_case)."""\n'
                f'        return await self._call("{name}", request, fields)\n'
            )
        parts.append("\n".join(methods))
        return "\n\n\n".join(parts).rstrip() + "\n"


def is_class(schema):
    return isinstance(schema, dict) and schema.get("type") == "object" and "properties" in schema


def doc_text(text):
    text = " ".join(str(text).split())
    return text.replace("\\", "\\\\").replace('"""', "'''")


HEADER = '''"""The API's types and operations, generated from docs/asyncapi.yaml by
tools/generate.py: do not edit (regenerate instead)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ._model import Model'''


def main(argv):
    doc = yaml.safe_load(DOCUMENT.read_text())
    text = Generator(doc).render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(
                f"generate: {OUTPUT.relative_to(HERE.parents[2])} is not what docs/asyncapi.yaml makes; "
                "run clients/python/tools/generate.py and commit the result",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
