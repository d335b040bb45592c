"""Pydantic's validation errors told as the farm's: each a ConfigError naming the
file, the key path, what was found and what was expected, with a did-you-mean
for an unknown key; and the names of a section's entries, which pydantic leaves
unchecked, told the same way."""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.config.mapping_hints import mapping_expected
from orchestrator.config.misplaced import unknown_key_hint
from orchestrator.config.required_keys import required_expected
from orchestrator.config.spec_types import NAME_EXPECTED, NAME_RE
from orchestrator.errors import ConfigError, ConfigErrors


def _key_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk a model class along an error location to the model that holds the key."""
    current: Any = model
    for item in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(item))
            if info is None:
                return None
            current = info.annotation
        else:
            args = getattr(current, "__args__", ())
            # dict[str, X] -> X; list[X] -> X; X | None -> X
            candidates = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            if candidates:
                current = candidates[-1]
            elif args:
                current = args[-1]
            else:
                return None
            if isinstance(current, type) and issubclass(current, BaseModel):
                # the dict key / list index consumed this step
                continue
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    args = getattr(current, "__args__", ())
    for arg in args:
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


# YAML 1.1 reads `1e3` as text (its floats need a '.' in the mantissa and a signed exponent)
_E_NOTATION = re.compile(r"[-+]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9_]+)[eE][-+]?[0-9]+")


# a list entry YAML reads as written, unquoted, inside brackets
_PLAIN = re.compile(r"[A-Za-z0-9_./+-]+")


def _text_number(value: Any) -> float | None:
    """The finite number a text YAML 1.1 did not read as one (`1e3`), else None."""
    if not isinstance(value, str) or not _E_NOTATION.fullmatch(value):
        return None
    try:
        number = float(value.replace("_", ""))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


# a duration as people write it (`30s`, `2m`, `1.5h`, `500ms`), where the key takes plain seconds
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)?\s*")
_UNIT = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600}


def _seconds_hint(key: str, value: Any) -> str | None:
    """ "a number of seconds" for a timeout key given text (`30s`, `2m`, `"30"`): the bare
    "expected a valid number" named neither the unit nor the number meant (review 180)."""
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return f"a number of seconds, e.g. {key}: 120"
    unit = match.group(2) or "s"
    factor = next(f for prefix, f in sorted(_UNIT.items(), key=lambda u: -len(u[0])) if unit.startswith(prefix))
    seconds = float(match.group(1)) * factor
    plain = f"{seconds:.0f}" if seconds.is_integer() else f"{seconds:g}"
    if seconds < 1:  # the farm's least timeout
        plain = f"1 (at least 1; {match.group(0).strip()} is {plain})"
    return f"a number of seconds, unquoted: {key}: {plain}"


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({'float' if isinstance(value, float) else type(value).__name__})"  # a WrittenFloat too


def _meant_keys(err: ValidationError, model: type[BaseModel]) -> set[tuple[tuple[Any, ...], str]]:
    """(where, key) of each missing key an unknown key beside it is a typo of (`pass_makrer`):
    told once, by the typo's did-you-mean, not also as "found nothing" (review 150)."""
    missing = {(tuple(i["loc"][:-1]), str(i["loc"][-1])) for i in err.errors() if i["type"] == "missing"}
    meant = set()
    for item in err.errors():
        if item["type"] == "extra_forbidden":
            loc = tuple(item["loc"])
            holder = _model_at(model, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), sorted(holder.model_fields) if holder else [], n=1)
            if close and (loc[:-1], close[0]) in missing:
                meant.add((loc[:-1], close[0]))
    return meant


def translate(err: ValidationError, file: Path, model: type[BaseModel]) -> ConfigErrors:
    """pydantic's errors, reworded as file / key / found / expected."""
    errors: list[ConfigError] = []
    meant = _meant_keys(err, model)
    for item in err.errors():
        loc = tuple(item["loc"])
        key = _key_path(loc)
        kind = item["type"]
        if kind == "extra_forbidden":
            holder = _model_at(model, loc[:-1])
            allowed = sorted(holder.model_fields) if holder else []
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f"Did you mean {close[0]!r}?" if close else unknown_key_hint(loc, item.get("input"))
            errors.append(
                ConfigError(
                    str(file),
                    key,
                    f"an unknown key {loc[-1]!r}",
                    "one of " + ", ".join(allowed) if allowed else "no such key",
                    hint,
                )
            )
        elif kind == "missing":
            if (loc[:-1], loc[-1]) in meant:
                continue  # the typo's own error says "Did you mean" this key
            holder = _model_at(model, loc[:-1])
            expected = required_expected(holder.__name__ if holder else None, str(loc[-1]))
            errors.append(ConfigError(str(file), key, "nothing", expected))
        elif kind in ("model_type", "dict_type"):  # pydantic named a Python class: say how to write the key
            holder = _model_at(model, loc) if kind == "model_type" else None
            errors.append(ConfigError(str(file), key, _describe(item.get("input")), mapping_expected(loc, holder)))
        elif kind in ("string_too_short", "too_short"):
            # pydantic's "Dictionary should have at least 1 item after validation, not 0" (variants: {}),
            # "String should have at least 1 character" (build: ''): say what the key holds (review 205)
            holder = _model_at(model, loc[:-1])
            what = required_expected(holder.__name__ if holder else None, str(loc[-1]))
            least = (item.get("ctx") or {}).get("min_length", 1)
            unit = "character" if kind == "string_too_short" else "entry"
            expected = f"at least {least} {unit}{'' if least == 1 else 's'}" + (
                "" if what == required_expected(None, "") else f": {what}"
            )
            errors.append(ConfigError(str(file), key, _describe(item.get("input")), expected))
        elif kind == "list_type" and isinstance(item.get("input"), str) and loc:
            # "expected a valid list" did not say how to write one: a single entry is bracketed
            value = item["input"]
            entry = value if _PLAIN.fullmatch(value) else repr(value)
            expected = f"a list: write it in brackets, {loc[-1]}: [{entry}]"
            errors.append(ConfigError(str(file), key, _describe(value), expected))
        else:
            message = item["msg"]
            for prefix in ("Value error, ", "Input should be ", "expected "):  # the error says "expected" itself
                if message.startswith(prefix):
                    message = message[len(prefix) :]
            found = _describe(item.get("input"))
            number = _text_number(item.get("input"))
            if kind in ("float_type", "int_type") and number is not None:
                # "found '1e3' (str)" said the number written was none, and not how to write it
                found = f"{item['input']!r}, which YAML reads as text (e-notation without a '.' and a signed exponent)"
                plain = f"{number:.0f}" if number.is_integer() and abs(number) < 1e18 else repr(number)
                message += f" written out ({plain})" + (
                    f" or as YAML's float ({number:.1e})" if kind == "float_type" else ""
                )
            seconds = _seconds_hint(str(loc[-1]), item.get("input")) if str(loc[-1]).endswith("timeout") else None
            if kind == "float_type" and seconds is not None and number is None:
                message = seconds
            errors.append(ConfigError(str(file), key, found, message))
    return ConfigErrors(errors)


def validate(model: type[BaseModel], raw: Any, file: Path, what: str) -> Any:
    if raw is None:
        raise ConfigError(str(file), "", "an empty file", what)
    if not isinstance(raw, dict):
        raise ConfigError(str(file), "", _describe(raw), f"a mapping ({what})")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise translate(err, file, model) from None


def check_names(raw: dict[str, Any], section: str, file: Path) -> list[ConfigError]:
    """The names of a section's entries (`nodes`, `variants`), which end up in paths and
    command lines: a model checks a mapping's values, not its keys."""
    errors = []
    mapping = raw.get(section)
    if isinstance(mapping, dict):
        for name in mapping:
            if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
                errors.append(ConfigError(str(file), f"{section}.{name}", f"the name {name!r}", NAME_EXPECTED))
    return errors
