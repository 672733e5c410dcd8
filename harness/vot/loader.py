"""Read vllm-on-tap YAML files and check them against their JSON Schemas.

Every mistake becomes one `UserError` naming the file, the field and (where
the YAML tells us) the line, with a fix: a preset that fails the schema is never
served, so the message has to be enough to correct the file.
"""

from __future__ import annotations

import difflib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness.errors import UserError

if TYPE_CHECKING:  # jsonschema is imported where a file is checked: reading YAML (the replay
    # server's trajectory, every CLI call) does not pay its ~50 ms import
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

SCHEMA_DIR = Path(__file__).parent / "schema"

# vllm-on-tap names these stacks but refuses them ("not supported in this version").
PLANNED_STACKS = ("kubernetes", "aws", "gcp")


# The most a preset or an environment may hold. Real ones are a few KB (the largest shipped, 2 KB);
# a 20 MB one took 58 s to parse and check, so a larger file is refused before it is parsed.
VOT_FILE_CAP = 256 * 1024


def _size_text(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def read_bytes(path: Path, *, cap: int | None = None, kind: str = "file") -> bytes:
    """The bytes of a file the user wrote; a missing, unreadable file or a folder is a UserError,
    and so is one over `cap` bytes (found by reading at most cap + 1 bytes, never the whole file)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            if cap is None:
                return fh.read()
            raw = fh.read(cap + 1)
            if len(raw) <= cap:
                return raw
            try:
                size = os.fstat(fh.fileno()).st_size
            except OSError:
                size = 0
    except FileNotFoundError:
        raise UserError("file not found", file=path,
                        fix=f"check the path (a relative one is read from {Path.cwd()})") from None
    except IsADirectoryError:
        raise UserError("is a folder, not a YAML file", file=path, fix="name the YAML file inside it") from None
    except OSError as exc:
        raise UserError(f"cannot be read: {exc.strerror or exc}", file=path,
                        fix="check the path and that you may read the file") from None
    big = f"{_size_text(size)} ({size} bytes)" if size > cap else f"more than {cap} bytes"  # a pipe: no size
    raise UserError(f"is {big}, over the {_size_text(cap)} ({cap} bytes) a {kind} may be (nothing was parsed)",
                    file=path, fix=f"a {kind} is a few KB of YAML: remove what was pasted into it, or check "
                                   "that this is the file you meant")


def parse_yaml(raw: bytes, path: Path) -> Any:
    """The YAML document in `raw` (read from `path`), of any type; any problem is a UserError."""
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError("is not UTF-8 text", file=path, fix="save it as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(
            f"not valid YAML: {problem}",
            file=path,
            line=mark.line + 1 if mark is not None else None,
            fix="check indentation, colons and quoting on that line",
        ) from None
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        # PyYAML's constructors raise these on a few values it recognises but cannot build
        # (a date such as 2026-02-30, a timestamp with a stray part, nesting too deep).
        raise UserError(
            f"not valid YAML: a value cannot be read ({exc})",
            file=path,
            fix="quote values that only look like dates or numbers, e.g. '2026-02-30'",
        ) from None


def load_yaml_bytes(path: Path, *, cap: int | None = None, kind: str = "file") -> tuple[dict[str, Any], bytes]:
    """The mapping in `path` and the file's bytes (so callers can hash what they read); a file
    over `cap` bytes is refused unparsed."""
    path = Path(path)
    raw = read_bytes(path, cap=cap, kind=kind)
    data = parse_yaml(raw, path)
    if not isinstance(data, dict):
        kind = "empty" if data is None else _yaml_type(data)
        raise UserError(
            f"the file is {kind}; it must be a mapping of keys (name: ..., ...)",
            file=path,
            line=1,
            fix="start the file with 'name: <name>' at column 0",
        )
    return data, raw


def load_yaml(path: Path, *, cap: int | None = None, kind: str = "file") -> dict[str, Any]:
    """The top-level mapping in a YAML file; any problem is a UserError."""
    return load_yaml_bytes(path, cap=cap, kind=kind)[0]


def load_schema(schema_name: str) -> dict[str, Any]:
    """The schema as checked: environment.schema.json names no stack, the stacks' own
    declarations fill in the `stack` enum and each stack's `config:` check."""
    schema = json.loads((SCHEMA_DIR / f"{schema_name}.schema.json").read_text("utf-8"))
    if schema_name == "environment":
        from harness.stack_specs.catalog import environment_schema

        schema = environment_schema(schema)
    return schema


@lru_cache(maxsize=None)
def _validator(schema_name: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(schema_name))


def _errors(instance: Any, schema_name: str) -> list[ValidationError]:
    """All errors, best match first, then by jsonschema's relevance."""
    errors = list(_validator(schema_name).iter_errors(instance))
    if not errors:
        return []
    from jsonschema.exceptions import best_match, relevance

    best = best_match(errors)
    rest = sorted((e for e in errors if e is not best), key=relevance, reverse=True)
    return [best, *rest]


def schema_errors(instance: Any, schema_name: str) -> list[tuple[str, str]]:
    """(field path, message) for every schema error, best first; [] when valid."""
    return [_explain(e)[:2] for e in _errors(instance, schema_name)]


def _non_text_key(instance: Any) -> list[Any] | None:
    """The path to the first mapping key YAML did not read as text (`1:`, `true:`, `null:`)."""
    stack: list[tuple[Any, list[Any]]] = [(instance, [])]
    while stack:
        node, parts = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            if isinstance(node, dict) and not isinstance(key, str):
                return [*parts, key]
            stack.append((value, [*parts, key]))
    return None


def check(instance: Any, schema_name: str, path: Path) -> None:
    """Raise one UserError for the best schema error in `instance` (read from `path`)."""
    bad = _non_text_key(instance)
    if bad is not None:  # the schema only names text keys (and jsonschema cannot sort mixed ones)
        key = bad[-1]
        raise UserError(f"key {key!r} is {_yaml_type(key)}, not text", file=path,
                        field=_field([*bad[:-1], str(key)]), fix=f"quote it: '{key}': ...",
                        line=_line_of(path, bad[:-1]))
    errors = _errors(instance, schema_name)
    if not errors:
        return
    field, message, fix, parts = _explain(errors[0])
    fix = fix or f"correct {field or 'the file'} as harness/vot/schema/{schema_name}.schema.json describes it"
    raise UserError(message, file=path, field=field or None, fix=fix, line=_line_of(path, parts))


# --- turning a jsonschema error into field / message / fix -------------------


def _explain(error: ValidationError) -> tuple[str, str, str | None, list[Any]]:
    """(field, message, fix, path parts) for one error."""
    parts = list(error.absolute_path)
    kind = error.validator
    value = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}

    if "propertyNames" in error.relative_schema_path:
        # jsonschema reports a bad key at its parent; the key itself is the instance.
        parts.append(value)
        return (
            _field(parts),
            f"'{value}' is not a flag: keys must look like --max-model-len (two dashes, lower case)",
            f"write it as '--{str(value).lstrip('-').lower()}'",
            parts,
        )
    if kind == "dependentRequired":
        deps = schema.get("dependentRequired") or {}
        given = next((k for k in deps if k in value), "?")
        needed = next((k for k in deps.get(given, []) if k not in value), "?")
        return (_field([*parts, needed]), f"'{given}' is given without '{needed}'",
                f"add {needed} beside {given}, or drop {given}", parts)
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = next((k for k in value if k not in allowed), "?")
        parts.append(extra)
        close = difflib.get_close_matches(str(extra), allowed, n=1)
        fix = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
        return _field(parts), f"unknown key '{extra}'", fix, parts
    if kind == "required":
        missing = next((k for k in error.validator_value if k not in value), "?")
        parts.append(missing)
        return _field(parts), f"missing required key '{missing}'", f"add '{missing}: ...'", parts

    field = _field(parts)
    leaf = parts[-1] if parts else ""
    if kind == "pattern":
        if isinstance(leaf, int) and parts[:1] == ["env"]:
            upper = str(value).upper().replace("-", "_")
            return (
                field,
                f"'{value}' must be an upper-case environment variable name like HF_TOKEN",
                f"write it as {upper} (the name only, never the value)",
                parts,
            )
        return (
            field,
            f"'{value}' must be lower-case letters, digits and dashes, starting with a letter or digit",
            f"try '{_slug(value)}'",
            parts,
        )
    if kind == "exclusiveMinimum":
        return (field, f"must be greater than {error.validator_value}, not {value}",
                _gpu_fix(leaf) or f"set {field} above {error.validator_value}", parts)
    if kind == "minimum":
        fix = f"set {field} to {error.validator_value} or more"
        if parts == ["config", "threads"]:
            fix += ", or remove it: llama.cpp's threads are then chosen from the cores free at each start"
        return field, f"must be at least {error.validator_value}, not {value}", fix, parts
    if kind == "maximum":
        return (field, f"must be at most {error.validator_value}, not {value}",
                f"set {field} to {error.validator_value} or less", parts)
    if kind == "minLength":
        return field, "must not be empty", f"give '{leaf}' a value or remove the key", parts
    if kind == "enum":
        options = [str(o) for o in error.validator_value]
        if leaf == "stack" and value in PLANNED_STACKS:
            message = f"stack '{value}' is planned in vllm-on-tap but not supported in this version"
        else:
            message = f"'{value}' is not one of the allowed values"
        close = difflib.get_close_matches(str(value), options, n=1)
        fix = (f"did you mean '{close[0]}'? " if close else "") + f"allowed: {', '.join(options)}"
        return field, message, fix, parts
    if kind == "type":
        wanted = error.validator_value
        wanted = wanted if isinstance(wanted, list) else [wanted]
        fix = None
        if isinstance(value, str) and {"number", "integer"} & set(wanted) and _is_number(value):
            fix = f"write {value} without quotes"
        names = " or ".join(_JSON_TYPES.get(w, w) for w in wanted)
        return field, f"must be {names}, not {_yaml_type(value)}", fix or f"write {field or 'it'} as {names}", parts
    return field, error.message, None, parts


_JSON_TYPES = {
    "string": "a string",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "a boolean",
    "object": "a mapping",
    "array": "a list",
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _field(parts: list[Any]) -> str:
    """`vllm_args.--max-model-len`, `env[0]`, `stacks.azure.gpu_memory_gb`."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _slug(value: Any) -> str:
    text = "".join(c if c.isalnum() else "-" for c in str(value).lower()).strip("-")
    return text or "my-name"


def _gpu_fix(leaf: Any) -> str | None:
    if leaf == "gpu_memory_gb":
        return "set the smallest GPU memory in GB the preset runs on (weights + KV cache), e.g. 16"
    return None


def _yaml_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


# --- finding the line of a field ----------------------------------------------


def _line_of(path: Path, parts: list[Any]) -> int | None:
    """1-based line of the deepest node of `parts` present in the file (None for the root)."""
    try:
        node = yaml.compose(Path(path).read_text("utf-8"))
    except Exception:  # the file already parsed once; if it now does not, just omit the line
        return None
    line = None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def check_name_matches_file(data: dict[str, Any], path: Path) -> None:
    """vllm-on-tap's rule for presets and environments: `name` is the file's stem."""
    if data["name"] != path.stem:
        raise UserError(
            f"name '{data['name']}' != file name '{path.stem}'",
            file=path,
            field="name",
            fix=f"rename the file or set name: {path.stem}",
        )


def available(root: Path, folder: Path) -> list[str]:
    """Names of the YAML files in `<root>/<folder>` (presets, environments)."""
    where = Path(root) / folder
    return sorted(p.stem for p in where.glob("*.yaml")) if where.is_dir() else []


def named_file(root: Path, folder: Path, name: str, kind: str, fix: str) -> Path:
    """`<root>/<folder>/<name>.yaml`, or one error listing what is available."""
    path = Path(root) / folder / f"{name}.yaml"
    if "/" in name or "\\" in name or not is_file(path):
        listed = ", ".join(available(root, folder)) or "none"
        raise UserError(f"no {kind} '{name}' in {folder}/ (available: {listed})", file=path, fix=fix)
    return path


def is_file(path: Path) -> bool:
    """Path.is_file() for a name the user typed: a name the OS refuses (too long, ...) is no file."""
    try:
        return Path(path).is_file()
    except OSError:
        return False
