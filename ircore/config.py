"""One configuration model, four sources: Python API > environment > config file > provider defaults.

Keys (the same in every source):

- ``providers``: allowlist, ``"all"`` (default), ``"none"`` or provider names
  (``IRCORE_PROVIDERS=vllm_c,triton``);
- ``disable``: denylist (``IRCORE_DISABLE=aiter``);
- ``priority``: per-op provider order (``IRCORE_PRIORITY="rms_norm=vllm_c,triton;silu_and_mul=triton"``);
  the key ``*`` gives the order of every op the source does not name itself
  (``IRCORE_PRIORITY="*=triton,vllm_c;rms_norm=vllm_c"``, ``"*" = [...]`` in a file);
- ``strict``: a broken provider (failed, invalid, conflict, incompatible), or an unavailable one
  that ``providers`` names, is an error at load time (``IRCORE_STRICT=1``);
- ``fusions``: which compile-time fusions run (``IRCORE_FUSIONS="add_rms_norm=off"``; see
  ``ircore.compile.FUSIONS``).
- ``trace_implementations``: tracing records the implementation each call would run instead of
  ``torch.ops.ircore.<op>`` (``IRCORE_TRACE_IMPLEMENTATIONS=1``; see ``ircore.IrOp.traced_call``).
- ``batch_invariant``: batch-invariant mode for the whole process: only implementations that
  claim batch invariance run (``IRCORE_BATCH_INVARIANT=1``; see ``ircore.batch_invariant``).

For ``providers``, ``disable``, ``strict``, ``trace_implementations`` and ``batch_invariant`` the
highest source that
sets the key decides; for ``priority`` the highest source that names the op (by its own entry
or by ``*``) decides, for
``fusions`` the highest source that names the fusion. Files: ``IRCORE_CONFIG``, else
``./ircore.toml``, else ``[tool.ircore]`` in ``./pyproject.toml``.

The environment and the file are read once, when the provider loader first needs the settings
(:func:`resolve_settings`), before any provider's code runs: so nothing written to ``os.environ``
later (by a provider, say) changes the configuration; :func:`reset_api_settings` reads them again.
What ``configure`` sets is kept in ``ircore._state.STATE`` with the rest of the state, and a
change tells the loader to decide provider states again on next use.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ircore import _ownership, dispatch
from ircore._state import STATE
from ircore.errors import ConfigError

__all__ = ["FUSIONS", "KNOWN_KEYS", "ConfigSource", "Settings", "configure", "normalize_fusions"]

KNOWN_KEYS = (
    "providers", "disable", "priority", "strict", "fusions", "trace_implementations", "batch_invariant",
)  # fmt: skip
ENV_VARS = {
    "providers": "IRCORE_PROVIDERS",
    "disable": "IRCORE_DISABLE",
    "priority": "IRCORE_PRIORITY",
    "strict": "IRCORE_STRICT",
    "fusions": "IRCORE_FUSIONS",
    "trace_implementations": "IRCORE_TRACE_IMPLEMENTATIONS",
    "batch_invariant": "IRCORE_BATCH_INVARIANT",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

#: Every compile-time fusion by name, with what it rewrites (``ircore.compile`` runs them). All are
#: on by default; switch them with the key ``fusions`` or per compile (``ircore.compile(model,
#: fusions=...)``).
FUSIONS: Mapping[str, str] = types.MappingProxyType(
    {
        "qk_norm_rope": "split(qkv) -> per-head rms_norm of q and k -> rotary_embedding -> "
        "fused_qk_norm_rope(qkv, ...) (vLLM's form; any eps, both styles, any head geometry)",
        "hf_qk_norm_rope": "Hugging Face's q_norm/k_norm on (B, S, H, D) views -> transpose -> "
        "rotary_pos_emb -> fused_qk_norm_rope over cat(q, k) with a cache of cos/sin's rows",
        "add_rms_norm": "a + b feeding rms_norm -> fused_add_rms_norm(a, b) (the sum may have other users)",
        "rms_norm_reshape": "rms_norm(x).reshape(-1, H) -> rms_norm(x.reshape(-1, H)), also for "
        "fused_add_rms_norm, so kernels and later patterns see 2-D inputs",
        "rms_norm_quant": "rms_norm or fused_add_rms_norm feeding an fp8 quant op (static, dynamic, group) "
        "-> the fused norm + quant op, when nothing else reads the normalised value",
        "silu_and_mul_quant": "silu_and_mul feeding a static or group fp8 quant op -> the fused op, "
        "when nothing else reads the activation",
    }
)


@dataclass
class ConfigSource:
    """The keys one source sets, parsed but not yet checked against known providers/ops."""

    name: str  # "ircore.configure()", "environment", or the file path
    values: dict[str, Any] = field(default_factory=dict)

    def where(self, key: str) -> str:
        """How a message names this key in this source: ``IRCORE_DISABLE`` or ``ircore.toml: disable``."""
        if self.name == "environment":
            return ENV_VARS[key]
        return f"{self.name}: {key}"


# ---------------------------------------------------------------------- parsing
def _name_list(value: Any, where: str, allow_all: bool) -> tuple[str, ...] | str:
    """A list of provider names, or ``"all"``/``"none"`` where allowed."""
    if isinstance(value, str):
        word = value.strip()
        if word in ("all", "none"):
            if not allow_all:
                raise ConfigError(f"{where}: {word!r} is not allowed here; give provider names")
            return word
        value = [v.strip() for v in word.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of provider names, got {value!r}")
    return tuple(value)


def _parse_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, str):  # the environment's form (a file may quote it too)
        raise ConfigError(f"{where}: expected true or false (or 1/0, yes/no, on/off), got {value!r}")
    raise ConfigError(  # a TOML number, or a Python value given to ircore.configure()
        f"{where}: expected true or false, got {value!r}: a boolean (unquoted true/false in TOML, True/False "
        "in Python)"
    )


def _parse_priority_string(text: str, where: str) -> dict[str, tuple[str, ...]]:
    """``rms_norm=vllm_c,triton;silu_and_mul=triton`` -> mapping."""
    out: dict[str, tuple[str, ...]] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        op, sep, names = part.partition("=")
        if not sep or not op.strip():
            raise ConfigError(
                f"{where}: cannot read {part!r}; expected OP=PROVIDER[,PROVIDER...] entries "
                "separated by ';' (OP may be '*', every op), e.g. '*=triton,vllm_c;rms_norm=vllm_c'"
            )
        out[op.strip()] = tuple(n.strip() for n in names.split(",") if n.strip())
    return out


def _parse_priority(value: Any, where: str) -> dict[str, tuple[str, ...]]:
    if isinstance(value, str):
        return _parse_priority_string(value, where)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table of op = [providers], got {value!r}")
    out: dict[str, tuple[str, ...]] = {}
    for op, names in value.items():
        parsed = _name_list(names, f"{where}.{op}", allow_all=False)
        assert isinstance(parsed, tuple)
        out[str(op)] = parsed
    return out


_ON = {"1", "on", "true", "yes"}
_OFF = {"0", "off", "false", "no"}


def normalize_fusions(value: Any, where: str) -> dict[str, bool]:
    """One fusion setting as ``{name: on}``; the names it does not mention are absent.

    Accepted: ``"all"``/``"none"``; a mapping name -> bool (``{"add_rms_norm": False}``); a
    string ``"add_rms_norm=off,rms_norm_reshape=on"``; a list of names to run (the others off).
    """
    names = tuple(FUSIONS)
    if isinstance(value, str) and value.strip() in ("all", "none"):
        return dict.fromkeys(names, value.strip() == "all")
    if isinstance(value, str) and "=" in value:
        parsed: dict[str, Any] = {}
        for part in value.split(","):
            name, sep, switch = part.partition("=")
            if not sep or switch.strip().lower() not in _ON | _OFF:
                raise ConfigError(
                    f"{where}: cannot read {part.strip()!r}; expected NAME=on|off entries separated "
                    f"by ',', e.g. 'add_rms_norm=off'; fusions: {', '.join(names)}"
                )
            parsed[name.strip()] = switch.strip().lower() in _ON
        value = parsed
    if isinstance(value, Mapping):
        out: dict[str, bool] = {}
        for name, on in value.items():
            _check_fusion_name(name, where, names)
            if not isinstance(on, bool):
                raise ConfigError(f"{where}: fusion {name!r} must be true or false, got {on!r}")
            out[name] = on
        return out
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        for name in value:
            _check_fusion_name(name, where, names)
        return {name: name in value for name in names}
    raise ConfigError(
        f"{where}: expected 'all', 'none', a list of fusion names or a table of name = true/false, "
        f"got {value!r}; fusions: {', '.join(names)}"
    )


def _check_fusion_name(name: Any, where: str, names: tuple[str, ...]) -> None:
    if name not in names:
        raise ConfigError(f"{where}: unknown fusion {name!r}; fusions: {', '.join(names)}")


def parse_values(raw: Mapping[str, Any], source: ConfigSource) -> ConfigSource:
    """Check the keys of ``raw`` and parse each into ``source``; errors name source and key."""
    for key, value in raw.items():
        if key not in KNOWN_KEYS:
            raise ConfigError(f"{source.name}: unknown key {key!r}; known keys: {', '.join(KNOWN_KEYS)}")
        where = source.where(key)
        if key in ("providers", "disable"):
            source.values[key] = _name_list(value, where, allow_all=key == "providers")
        elif key == "priority":
            source.values[key] = _parse_priority(value, where)
        elif key == "fusions":
            # merged: configure(fusions={"a": False}) then {"b": False} switches both off
            source.values[key] = {**source.values.get(key, {}), **normalize_fusions(value, where)}
        else:
            source.values[key] = _parse_bool(value, where)
    return source


# Read elsewhere: the config file's path, the kernel build cache (providers), the switch that turns
# the compiled call-signature helper off (ircore._signature), release builds' switch (no kernel
# build in setup.py).
_OTHER_ENV_VARS = ("IRCORE_CONFIG", "IRCORE_CACHE_DIR", "IRCORE_NO_SIGNATURE", "IRCORE_NO_BUILD")


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """The ``IRCORE_*`` variables neither ircore nor an installed provider reads: a provider owns
    ``IRCORE_<NAME>_*`` for its entry-point name (``IRCORE_VLLM_C_PDL``, ``IRCORE_TRITON_AUTOTUNE``;
    its README says which), found from the installed metadata without importing it."""
    unknown = [v for v in environ if v.startswith("IRCORE_") and v not in ENV_VARS.values()]
    unknown = [v for v in unknown if v not in _OTHER_ENV_VARS]
    if unknown:  # the entry-point scan only when there is something to place
        prefixes = tuple(f"IRCORE_{name.upper()}_" for name in STATE.providers.discovered())
        unknown = [v for v in unknown if not v.startswith(prefixes)]
    return sorted(unknown)


def read_environment(environ: Mapping[str, str] | None = None) -> ConfigSource:
    environ = os.environ if environ is None else environ
    raw = {key: environ[var] for key, var in ENV_VARS.items() if var in environ}
    unknown = unknown_environment(environ)
    if unknown:
        import difflib
        import logging

        known = [*ENV_VARS.values(), *_OTHER_ENV_VARS]
        named = []
        for var in unknown:
            close = difflib.get_close_matches(var, known, n=1)
            named.append(f"{var} (did you mean {close[0]}?)" if close else var)
        logging.getLogger("ircore").warning(
            "ignoring unknown environment variable(s) %s; ircore reads %s, and each installed "
            "provider IRCORE_<PROVIDER>_* (its README lists them)",
            ", ".join(named),
            ", ".join(known),
        )
    return parse_values(raw, ConfigSource("environment"))


def find_config_file(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """``IRCORE_CONFIG``, else ``./ircore.toml``, else ``./pyproject.toml`` if it has [tool.ircore]."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    explicit = environ.get("IRCORE_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"IRCORE_CONFIG: no such file {explicit!r}")
        return path
    for candidate in (cwd / "ircore.toml", cwd / "pyproject.toml"):
        if candidate.is_file():
            if candidate.name == "pyproject.toml" and b"[tool.ircore" not in candidate.read_bytes():
                continue
            return candidate
    return None


def read_file(path: Path) -> ConfigSource:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("ircore", {})
        name = f"{path} [tool.ircore]"
    else:
        name = str(path)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{name}: expected a table")
    return parse_values(data, ConfigSource(name))


# ---------------------------------------------------------------------- the resolved settings
@dataclass
class Settings:
    """The configuration in force: which providers may load, priorities by source, strictness."""

    sources: list[ConfigSource]  # highest precedence first
    providers: tuple[str, ...] | str = "all"
    providers_from: str = "default"
    disable: tuple[str, ...] = ()
    disable_from: str = "default"
    strict: bool = False
    strict_from: str = "default"
    trace_implementations: bool = False
    trace_implementations_from: str = "default"
    batch_invariant: bool = False
    batch_invariant_from: str = "default"

    def enabled(self, provider: str) -> tuple[bool, str]:
        """Whether config lets ``provider`` load, and if not, which setting says so."""
        if self.providers == "none":
            return False, f"{self.providers_from} is 'none'"
        if self.providers != "all" and provider not in self.providers:
            return False, f"not in {self.providers_from} ({', '.join(self.providers) or 'empty'})"
        if provider in self.disable:
            return False, f"listed in {self.disable_from}"
        return True, ""

    def named(self, provider: str) -> bool:
        """Whether the allowlist names ``provider`` (rather than taking ``all``)."""
        return isinstance(self.providers, tuple) and provider in self.providers

    def check_names(self, known_providers: set[str], known_ops: set[str]) -> None:
        """Every provider and op a source names must exist; the error names source and key."""
        for source in self.sources:
            for key in ("providers", "disable"):
                names = source.values.get(key, ())
                if isinstance(names, str):
                    continue
                for name in names:
                    if name not in known_providers:
                        raise ConfigError(
                            f"{source.where(key)}: unknown provider {name!r}; "
                            f"known providers: {sorted(known_providers) or 'none installed'}"
                        )
            for op, names in source.values.get("priority", {}).items():
                if op not in known_ops and op != dispatch.WILDCARD:
                    raise ConfigError(
                        f"{source.where('priority')}: unknown op {op!r}; known ops: {sorted(known_ops)} "
                        f"(or {dispatch.WILDCARD!r} for every op)"
                    )
                # a '*' list may name a provider that lacks some ops (skipped for those), never
                # one that is not installed
                what = "every op ('*')" if op == dispatch.WILDCARD else f"op {op!r}"
                for name in names:
                    if name != "native" and name not in known_providers:
                        raise ConfigError(
                            f"{source.where('priority')}: unknown provider {name!r} for {what}; "
                            f"known providers: {sorted(known_providers | {'native'})}"
                        )


_api_lock = threading.Lock()


def api_source() -> ConfigSource:
    """What ``configure`` set, as a source (its values live in ``STATE.config_api``)."""
    return ConfigSource("ircore.configure()", STATE.config_api)


#: The environment and the file as first read (see the module docstring): [] until then.
_READ: list[list[ConfigSource]] = []


def _read(environ: Mapping[str, str] | None, cwd: Path | None) -> list[ConfigSource]:
    sources = [read_environment(environ)]
    path = find_config_file(environ, cwd)
    if path is not None:
        sources.append(read_file(path))
    return sources


def read_sources() -> list[ConfigSource]:
    """The environment's and the file's settings, read on the first call (an error is not kept:
    it is raised again on the next)."""
    with _api_lock:
        if not _READ:
            _READ.append(_read(None, None))
        return list(_READ[0])


def remembered_sources() -> list[list[ConfigSource]]:
    """What :func:`read_sources` keeps, for ``ircore.testing.isolated`` to put back."""
    return list(_READ)


def restore_sources(remembered: list[list[ConfigSource]]) -> None:
    with _api_lock:
        _READ[:] = remembered


def resolve_settings(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """Stack the environment and the file under the API settings, decide each key.

    Without arguments the environment and file as first read (:func:`read_sources`); with either,
    read now from ``environ`` (default ``os.environ``) and ``cwd`` (default the working directory).
    """
    read = read_sources() if environ is None and cwd is None else _read(environ, cwd)
    sources = [api_source(), *read]
    settings = Settings(sources=sources)
    for key in ("providers", "disable", "strict", "trace_implementations", "batch_invariant"):
        for source in sources:
            if key in source.values:
                setattr(settings, key, source.values[key])
                setattr(settings, f"{key}_from", source.where(key))
                break
    return settings


def fusion_layers(settings: Settings | None) -> list[dict[str, bool]]:
    """The ``fusions`` setting of each source that has one, highest first."""
    sources = settings.sources if settings is not None else [api_source()]
    return [source.values["fusions"] for source in sources if "fusions" in source.values]


def configure(
    *,
    providers: Sequence[str] | str | None = None,
    disable: Sequence[str] | None = None,
    priority: Mapping[str, Sequence[str] | None] | None = None,
    strict: bool | None = None,
    fusions: Mapping[str, bool] | Sequence[str] | str | None = None,
    trace_implementations: bool | None = None,
    batch_invariant: bool | None = None,
) -> None:
    """Set configuration from Python; it outranks the environment and config files.

    ``providers`` is an allowlist (or ``"all"``/``"none"``), ``disable`` a denylist, ``priority``
    maps op names to provider lists (``"*"``: every op not named here; ``None`` removes an op's
    setting), ``strict`` makes a broken
    provider (or an unavailable one that ``providers`` names) an error, ``fusions`` switches
    compile-time fusions (``{"add_rms_norm": False}``, a list of the names to run, ``"all"``,
    ``"none"``), ``trace_implementations`` makes tracing record the implementation each call
    would run instead of ``torch.ops.ircore.<op>``, ``batch_invariant`` turns batch-invariant
    mode on for the whole process (see ``ircore.batch_invariant``). A provider disabled here stops
    being used at once; one enabled here loads on next use. Compiled functions recompile on their
    next call after any change. A provider's own code (its import and hooks) may not call it.
    """
    _ownership.refuse_provider_code("ircore.configure()")
    raw: dict[str, Any] = {}
    if providers is not None:
        raw["providers"] = providers
    if disable is not None:
        raw["disable"] = disable
    if strict is not None:
        raw["strict"] = strict
    if fusions is not None:
        raw["fusions"] = fusions
    if trace_implementations is not None:
        raw["trace_implementations"] = trace_implementations
    if batch_invariant is not None:
        raw["batch_invariant"] = batch_invariant
    if raw:
        with _api_lock:
            parse_values(raw, api_source())
        STATE.config_changed()
    if priority is not None:
        dispatch.set_priority(priority)


def reset_api_settings() -> None:
    """Forget everything ``configure`` set (for tests and long-lived tools); read the environment
    and the file again on next use."""
    _ownership.refuse_provider_code("ircore.config.reset_api_settings()")
    with _api_lock:
        STATE.config_api.clear()
        _READ.clear()
    STATE.config_changed()
