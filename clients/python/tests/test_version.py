"""The package's version is the project's release: the module's and the Rust
client's (Cargo.toml), and what pip recorded when it installed it."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

import dlock

ROOT = pathlib.Path(__file__).resolve().parents[3]


def cargo_version(manifest: pathlib.Path) -> str:
    match = re.search(r'^version = "([^"]+)"', manifest.read_text(), re.MULTILINE)
    assert match, f"no version in {manifest}"
    return match.group(1)


def test_version_is_the_module_and_the_rust_clients():
    assert dlock.__version__ == cargo_version(ROOT / "Cargo.toml")
    assert dlock.__version__ == cargo_version(ROOT / "core" / "Cargo.toml")
    assert dlock.__version__ == cargo_version(ROOT / "clients" / "rust" / "Cargo.toml")


def test_installed_metadata_has_the_same_version():
    assert importlib.metadata.version("dlock-redis") == dlock.__version__
