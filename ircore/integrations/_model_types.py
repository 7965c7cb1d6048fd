"""A transformers model type (``config.model_type``) -> the modeling module its models come from.

Resolved as transformers' auto classes do: the model type's package is
``model_type_to_module_name(model_type)`` (``gemma3_text`` -> ``gemma3``, ``llama4_text`` ->
``llama4``), and the model class is the one ``AutoModel`` (else ``AutoModelForCausalLM``) names for
it, looked up in that package and else at transformers' top level (``internlm3`` ->
``LlamaModel``, in ``modeling_llama``). The modeling module is the one that class is defined in;
a model type that no auto model class names falls back to ``<package>.modeling_<package>``.
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType

_WHO = "ircore.integrations.transformers.apply_to_classes"
_HINT = "pass a model type as in config.model_type ('llama', 'qwen3'), a modeling module or a class"


def _model_class_name(model_type: str) -> str | None:
    from transformers.models.auto import modeling_auto

    for mapping in (modeling_auto.MODEL_MAPPING_NAMES, modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        name = mapping.get(model_type)
        if isinstance(name, (tuple, list)):
            name = name[0]
        if isinstance(name, str):
            return name
    return None


def modeling_module(model_type: str) -> ModuleType:
    """The modeling module of ``model_type``'s models; ValueError naming close types if unknown."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    package = model_type_to_module_name(model_type)
    default = f"transformers.models.{package}.modeling_{package}"
    if model_type not in CONFIG_MAPPING_NAMES:
        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING_NAMES), n=3)
        suggestion = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"{_WHO}: no module {default} ({model_type!r} is not a model type of transformers "
            f"{transformers.__version__}{suggestion}); {_HINT}"
        )
    class_name = _model_class_name(model_type)
    if class_name is not None:
        package_module = importlib.import_module(f"transformers.models.{package}")
        cls = getattr(package_module, class_name, None) or getattr(transformers, class_name, None)
        if isinstance(cls, type):
            return importlib.import_module(cls.__module__)
    try:
        return importlib.import_module(default)
    except ModuleNotFoundError as exc:
        raise ValueError(
            f"{_WHO}: model type {model_type!r} has no modeling module ({default}: {exc}) and no auto "
            f"model class names it; {_HINT}"
        ) from exc
