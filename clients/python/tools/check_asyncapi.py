#!/usr/bin/env python3
"""Checks docs/asyncapi.yaml the way a consumer of it would:

1. it is YAML a strict parser reads (PyYAML);
2. it is an AsyncAPI 3.0 document (parsed into asyncapi3's object model of
   the specification, which refuses unknown fields, wrong types and bad
   values);
3. every $ref in it resolves;
4. every schema in it is a valid JSON Schema (draft 7, what an AsyncAPI
   Schema Object extends), and every message example matches its payload;
5. every golden fixture (libs/qm-wire/tests/fixtures) is listed in
   schemas.json and matches the schema it claims, read closed: a field the
   schema does not name is an error, so the document cannot lag behind
   what the services send.

    check_asyncapi.py [DOCUMENT [FIXTURES]]     exit 1 naming every problem
"""

import copy
import json
import sys
import warnings
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[3]


def pointer(doc, ref):
    if not ref.startswith("#/"):
        raise KeyError(f"{ref}: only references inside the document are used")
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node[part]
    return node


def refs(node, path="#"):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield path, v
            else:
                yield from refs(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from refs(v, f"{path}/{i}")


def closed(schema):
    """The schema with every object that names its properties closed to
    others (unless it says what others may be)."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and "$ref" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


BASE = "urn:quartermaster:asyncapi"


def validator(doc, ref, close):
    """A draft 7 validator of the schema at `ref` in `doc`, its references
    resolved in `doc` (closed: see `closed`)."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    root = closed(doc) if close else doc
    registry = Registry().with_resource(BASE, Resource.from_contents(root, default_specification=DRAFT7))
    return jsonschema.Draft7Validator({"$ref": BASE + ref}, registry=registry)


def errors_of(v, instance):
    """Where `instance` breaks `v`'s schema, each as 'at <path>: <why>'."""
    try:
        found = sorted(v.iter_errors(instance), key=lambda e: [str(p) for p in e.path])
    except Exception as e:  # a reference that resolves to nothing
        return [f"cannot be checked: {str(e).splitlines()[0][:200]}"]
    return [f"at {'/'.join(str(p) for p in e.path) or '(top)'}: {e.message}" for e in found]


def check(document: Path, fixtures: Path) -> list:
    problems = []
    text = document.read_text()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"{document}: not YAML a strict parser reads: {e}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from asyncapi3.models.asyncapi import AsyncAPI3

        try:
            AsyncAPI3.model_validate(doc)
        except Exception as e:  # pydantic's ValidationError, every field named
            problems.append(f"{document}: not an AsyncAPI 3.0 document: {e}")
    for where, ref in refs(doc):
        try:
            pointer(doc, ref)
        except (KeyError, IndexError, ValueError, TypeError):
            problems.append(f"{where}: $ref {ref} resolves to nothing")
    schemas = [(f"#/components/schemas/{n}", s) for n, s in doc.get("components", {}).get("schemas", {}).items()]
    for name, message in doc.get("components", {}).get("messages", {}).items():
        if "payload" in message:
            schemas.append((f"#/components/messages/{name}/payload", message["payload"]))
    for where, schema in schemas:
        try:
            jsonschema.Draft7Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            problems.append(f"{where}: not a valid JSON Schema: {e.message}")
    for name, message in doc.get("components", {}).get("messages", {}).items():
        for i, example in enumerate(message.get("examples", [])):
            if "payload" in example and "payload" in message:
                v = validator(doc, f"#/components/messages/{name}/payload", close=False)
                problems.extend(
                    f"#/components/messages/{name}/examples/{i}: {m}" for m in errors_of(v, example["payload"])
                )
    manifest = json.loads((fixtures / "schemas.json").read_text())
    for f in sorted(fixtures.glob("*.json")):
        if f.name == "schemas.json":
            continue
        ref = manifest.get(f.name)
        if ref is None:
            problems.append(f"fixture {f.name}: not in schemas.json (which schema is it?)")
            continue
        try:
            pointer(doc, ref)
        except (KeyError, IndexError):
            problems.append(f"fixture {f.name}: {ref} is not in the document")
            continue
        v = validator(doc, ref, close=True)
        problems.extend(f"fixture {f.name} {m} (against {ref})" for m in errors_of(v, json.loads(f.read_text())))
    for name in manifest:
        if not (fixtures / name).exists():
            problems.append(f"schemas.json lists {name}, which is not a fixture")
    return problems


def main(argv):
    document = Path(argv[0]) if argv else ROOT / "docs" / "asyncapi.yaml"
    fixtures = Path(argv[1]) if len(argv) > 1 else ROOT / "libs" / "qm-wire" / "tests" / "fixtures"
    problems = check(document, fixtures)
    for p in problems:
        print(f"asyncapi: {p}", file=sys.stderr)
    if problems:
        print(f"asyncapi: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    fixtures_n = len(json.loads((fixtures / "schemas.json").read_text()))
    print(f"asyncapi: {document.name} is AsyncAPI 3.0; every reference resolves; {fixtures_n} fixtures match their schemas")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
