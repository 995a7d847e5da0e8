"""The shipped model table (``checks/models.yaml``): each model's shape and, where public, a measured training run.

The shape feeds the terms that plain parameter counts cannot: activations (layers, hidden, heads), the attention
FLOPs (layers, hidden, sequence length) and the KV cache (layers, KV heads, head size).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from nvdeploy.config.builtin import data_dir
from nvdeploy.config.yamlfile import ConfigError, line_of, load_yaml_file

_SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "vocab", "seq_len")
_MODEL_KEYS = {"params", "source", "published", *_SHAPE_KEYS}
_PUBLISHED_KEYS = {"gpu_hours", "profile", "tokens", "train_flops", "source"}


@dataclass(frozen=True)
class PublishedRun:
    """A measured training run: GPU-hours on a profile's SKU, or total training FLOPs, for ``tokens``."""

    tokens: float
    source: str
    gpu_hours: Optional[float] = None
    profile: Optional[str] = None
    train_flops: Optional[float] = None


@dataclass(frozen=True)
class ModelShape:
    """A transformer's size and, when known, its shape. ``--params 70B`` alone gives a shape-less model."""

    name: str
    params: float
    layers: Optional[int] = None
    hidden: Optional[int] = None
    heads: Optional[int] = None
    kv_heads: Optional[int] = None
    vocab: Optional[int] = None
    seq_len: Optional[int] = None
    source: str = ""
    published: Optional[PublishedRun] = None

    @property
    def has_shape(self) -> bool:
        return None not in (self.layers, self.hidden, self.heads, self.kv_heads)

    @property
    def head_dim(self) -> Optional[int]:
        return self.hidden // self.heads if self.hidden and self.heads else None


def _positive(body: Any, key: str, file: str, where: str, integer: bool = False) -> Any:
    value = body[key]
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value <= 0:
        kind = "a positive integer" if integer else "a positive number (write exponents with a sign: 7e+10)"
        raise ConfigError(f"must be {kind}, got {value!r}", file, line_of(body, key), f"{where}.{key}")
    return value


def _published(body: Any, file: str, where: str) -> PublishedRun:
    if not isinstance(body, dict):
        raise ConfigError("must be a mapping", file, None, where)
    unknown = set(body) - _PUBLISHED_KEYS
    if unknown:
        raise ConfigError(f"unknown key (allowed: {', '.join(sorted(_PUBLISHED_KEYS))})", file,
                          line_of(body, sorted(unknown)[0]), f"{where}.{sorted(unknown)[0]}")
    for key in ("tokens", "source"):
        if key not in body:
            raise ConfigError("missing required key", file, line_of(body), f"{where}.{key}")
    if ("gpu_hours" in body) == ("train_flops" in body) or ("gpu_hours" in body) != ("profile" in body):
        raise ConfigError("give gpu_hours with profile, or train_flops", file, line_of(body), where)
    return PublishedRun(
        tokens=float(_positive(body, "tokens", file, where)), source=str(body["source"]),
        gpu_hours=float(_positive(body, "gpu_hours", file, where)) if "gpu_hours" in body else None,
        profile=str(body["profile"]) if "profile" in body else None,
        train_flops=float(_positive(body, "train_flops", file, where)) if "train_flops" in body else None)


def load_models(path: Optional[Union[str, Path]] = None) -> dict[str, ModelShape]:
    """Every model of the table by name. Raises ConfigError (file, line, key) on a malformed table."""
    target = Path(path) if path is not None else data_dir("checks") / "models.yaml"
    file = str(target)
    data = load_yaml_file(target)
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ConfigError("missing mapping 'models'", file, line_of(data), "models")
    out: dict[str, ModelShape] = {}
    for name, body in models.items():
        where = f"models.{name}"
        if not isinstance(body, dict):
            raise ConfigError("must be a mapping", file, line_of(models, name), where)
        unknown = set(body) - _MODEL_KEYS
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigError(f"unknown key (allowed: {', '.join(sorted(_MODEL_KEYS))})", file,
                              line_of(body, key), f"{where}.{key}")
        if "params" not in body:
            raise ConfigError("missing required key", file, line_of(body), f"{where}.params")
        shape = {k: int(_positive(body, k, file, where, integer=True)) for k in _SHAPE_KEYS if k in body}
        out[str(name)] = ModelShape(
            name=str(name), params=float(_positive(body, "params", file, where)), source=str(body.get("source", "")),
            published=_published(body["published"], file, f"{where}.published") if "published" in body else None,
            **shape)
    return out
