"""hera's generated Argo and Kubernetes models, imported at half of hera's start-up cost.

Why: `import hera.workflows` costs about 0.95 CPU-s, more than the rest of a compile. Two
things make up most of it, and mfargo needs neither at import (figures: README, "Speed"):
* `hera/workflows/__init__.py` imports hera's whole high-level API (Steps, DAG, Container
  ...), while mfargo builds only the generated models. While the models load, a bare
  stand-in for the `hera.workflows` package keeps that `__init__` from running; the
  stand-in is removed right after, so a later `import hera.workflows` gets the real one.
* pydantic builds every model's validator when its class is created (about 300 classes);
  with `defer_build` each is built the first time it is used, so a compile pays for the
  thirty or so it uses. The models' module-level `model_rebuild()` calls would force
  those builds, so they are skipped while it loads: a deferred model resolves its forward
  references from its module when first built, which is then complete.
Models are validated as usual when built; only the time of building them moves.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def _import_models() -> types.ModuleType:
    if "hera.workflows.models" in sys.modules:
        return sys.modules["hera.workflows.models"]
    from hera.shared._pydantic import APIBaseModel

    config = APIBaseModel.model_config
    had_defer = "defer_build" in config
    config.setdefault("defer_build", True)
    stand_in = None
    if "hera.workflows" not in sys.modules:
        spec = importlib.util.find_spec("hera.workflows")
        stand_in = types.ModuleType("hera.workflows")
        stand_in.__path__ = list(spec.submodule_search_locations or [])
        sys.modules["hera.workflows"] = stand_in
    APIBaseModel.model_rebuild = classmethod(lambda cls, *args, **kwargs: None)  # type: ignore[method-assign]
    try:
        import hera.workflows.models as models
    finally:
        del APIBaseModel.model_rebuild  # pydantic's own again
        if not had_defer:
            del config["defer_build"]  # models made later (e.g. by a user's hera code) build eagerly
        if stand_in is not None and sys.modules.get("hera.workflows") is stand_in:
            del sys.modules["hera.workflows"]
    return models


models = _import_models()
