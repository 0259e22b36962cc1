"""Read a small configuration document (YAML, TOML or JSON, chosen by the file extension)."""

from __future__ import annotations

import json
from pathlib import Path


def load_document(path, what: str) -> object:
    """Return the parsed document at ``path`` (a mapping, usually).

    ``what`` names the file in errors ("preset file", "price file"). The file is UTF-8 text; a
    leading byte-order mark is ignored. Raises ValueError naming the file for an extension other
    than .yaml, .yml, .toml or .json, text that is not UTF-8, or a document that does not parse;
    FileNotFoundError when the file is missing.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ValueError(f"{p}: {what} extension must be .yaml, .yml, .toml or .json, got {suffix!r}")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{p}: a {what} must be UTF-8 text: {error}") from error
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(text)
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        return json.loads(text)
    except Exception as error:  # JSONDecodeError, TOMLDecodeError, yaml.YAMLError, ...
        raise ValueError(f"{p}: not a valid {what}: {error}") from error
