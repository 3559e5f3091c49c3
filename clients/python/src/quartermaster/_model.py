"""The base of every generated model: from and to the API's JSON (camelCase
keys), nested models included. Unknown keys are ignored, so a newer
service's answers keep decoding (fields are only added within v1)."""

from __future__ import annotations

from typing import Any


def _decode(conv: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(conv, tuple):
        what, inner = conv
        if what == "model":
            from ._api import MODELS

            return MODELS[inner].from_dict(value)
        if what == "list":
            return [_decode(inner, v) for v in value]
        if what == "dict":
            return {k: _decode(inner, v) for k, v in value.items()}
    return value


def _encode(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


class Model:
    """A message of the API (see its generated subclasses)."""

    _spec: tuple = ()

    @classmethod
    def from_dict(cls, data: dict) -> "Model":
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        kwargs = {}
        for attr, key, conv, _required in cls._spec:
            if key in data:
                kwargs[attr] = _decode(conv, data[key])
        return cls(**kwargs)

    def to_dict(self) -> dict:
        out = {}
        for attr, key, _conv, required in self._spec:
            value = getattr(self, attr)
            # Absent and empty mean the same to the services.
            if value is None or (not required and value in ([], {})):
                continue
            out[key] = _encode(value)
        return out

    @classmethod
    def from_fields(cls, fields: dict) -> "Model":
        """The model from snake_case keyword fields, nested models given as
        models or as dicts of camelCase JSON."""
        names = {attr for attr, *_ in cls._spec}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)} (fields: {', '.join(sorted(names))})")
        decoded = {}
        for attr, _key, conv, _required in cls._spec:
            if attr in fields:
                v = fields[attr]
                decoded[attr] = v if isinstance(v, Model) or v is None else _decode_loose(conv, v)
        return cls(**decoded)


def _decode_loose(conv: Any, value: Any) -> Any:
    """A field given by a caller: models stay, dicts of JSON are decoded."""
    if isinstance(conv, tuple):
        what, inner = conv
        if what == "model" and isinstance(value, dict):
            return _decode(conv, value)
        if what == "list" and isinstance(value, (list, tuple)):
            return [v if isinstance(v, Model) else _decode_loose(inner, v) for v in value]
    return value
