"""The installed wheel's metadata and tag: the version is the Cargo
workspace's, the licence and the Python range are declared, and the wheel is manylinux2014
(glibc 2.17), as scripts/build-python.sh builds it."""

import importlib.metadata
import pathlib
import re

import numpy as np

import cuframes

ROOT = pathlib.Path(__file__).resolve().parents[2]


def workspace_version():
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def test_version_comes_from_the_cargo_workspace():
    assert importlib.metadata.version("cuframes") == workspace_version()
    assert cuframes.__version__ == workspace_version()


def test_metadata_declares_licence_python_and_numpy():
    meta = importlib.metadata.metadata("cuframes")
    assert meta["License-Expression"] == "LGPL-2.1-or-later"
    assert "LICENSE" in meta.get_all("License-File")
    assert meta["Requires-Python"] == ">=3.9"
    assert "GNU LESSER GENERAL PUBLIC LICENSE" in importlib.metadata.distribution("cuframes").read_text(
        "licenses/LICENSE"
    )
    assert "pip install ./python" in meta.get_payload()  # the README is the long description
    requires = meta.get_all("Requires-Dist")
    assert "numpy>=1.23 ; extra == 'numpy'" in requires, requires
    # The suite runs on a NumPy the package declares (build/venv-oldest runs the minimum).
    assert tuple(int(p) for p in np.__version__.split(".")[:2]) >= (1, 23)


def test_wheel_is_abi3_and_manylinux2014():
    wheel = importlib.metadata.distribution("cuframes").read_text("WHEEL")
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    assert "cp39-abi3-manylinux_2_17_x86_64" in tags, wheel
    assert "cp39-abi3-manylinux2014_x86_64" in tags, wheel
