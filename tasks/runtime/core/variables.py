"""``${name}``, ``${a.b}`` and ``${env:NAME}`` substitution in workflow files.

A string that is exactly one reference takes the variable's value with its type (a number stays a
number); references inside longer strings are interpolated as text."""
from __future__ import annotations

import os
import re
from typing import Any, Callable

from ...errors import ConfigError

REF = re.compile(r"\$\{([^}]*)\}")


def lookup(name: str, scope: dict[str, Any]) -> Any:
    if name.startswith("env:"):
        env_name = name[4:]
        if env_name not in os.environ:
            raise KeyError(f"environment variable {env_name} is not set")
        return os.environ[env_name]
    value: Any = scope
    for part in name.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            known = ", ".join(sorted(scope)) or "none defined"
            raise KeyError(f"unresolved variable ${{{name}}} (vars: {known}; or use ${{env:NAME}})")
    return value


def substitute(value: Any, scope: dict[str, Any], where: Callable[[tuple], str], loc: tuple = ()) -> Any:
    """Return ``value`` with every reference replaced; errors name the position of the string."""
    if isinstance(value, dict):
        return {k: substitute(v, scope, where, loc + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, scope, where, loc + (i,)) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    try:
        whole = REF.fullmatch(value)
        if whole:
            return lookup(whole.group(1), scope)
        return REF.sub(lambda m: str(lookup(m.group(1), scope)), value)
    except KeyError as err:
        raise ConfigError(f"{where(loc)}: {err.args[0]}") from None


def resolve_vars(raw_vars: dict[str, Any], where: Callable[[tuple], str]) -> dict[str, Any]:
    """Resolve ``vars`` in order; each may use the environment and the vars defined before it."""
    scope: dict[str, Any] = {}
    for name, value in raw_vars.items():
        scope[name] = substitute(value, scope, where, ("vars", name))
    return scope
