"""Read a small configuration document (YAML, TOML or JSON, chosen by the file extension)."""

from __future__ import annotations

import json
from pathlib import Path


def load_document(path, what: str) -> object:
    """Return the parsed document at ``path`` (a mapping, usually).

    ``what`` names the file in errors ("preset file", "price file"). Raises ValueError for an
    extension other than .yaml, .yml, .toml or .json, or a document that does not parse;
    FileNotFoundError when the file is missing.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    text = p.read_text(encoding="utf-8")
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(text)
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
    except ValueError as error:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise ValueError(f"{p}: not a valid {what}: {error}") from error
    except Exception as error:  # yaml.YAMLError
        raise ValueError(f"{p}: not a valid {what}: {error}") from error
    raise ValueError(f"{p}: {what} extension must be .yaml, .yml, .toml or .json, got {suffix!r}")
