"""The package itself: `__version__`, `__all__` and the stub agree
with the module, and the publishers' Python subclasses (which exist for the exit-time close)
show the extension's real constructor signature and docs."""

import ast
import importlib.metadata
import inspect
import pathlib
import pydoc
import re

import pytest

import cuframes
from conftest import needs_class_signatures
from cuframes import _cuframes

STUB = pathlib.Path(cuframes.__file__).with_name("__init__.pyi")


def _stub_tree():
    return ast.parse(STUB.read_text())


def test_version_is_the_packages():
    v = cuframes.__version__
    assert isinstance(v, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-].*)?", v), v
    # The wheel's metadata and the extension take it from the same workspace version.
    assert v == importlib.metadata.version("cuframes")


def test_all_names_exist_and_include_tensor_and_host_copy_count():
    assert "Tensor" in cuframes.__all__
    assert "host_copy_count" in cuframes.__all__
    for name in cuframes.__all__:
        assert hasattr(cuframes, name), name
    star = {}
    exec("from cuframes import *", star)
    assert star["Tensor"] is _cuframes.Tensor
    assert star["host_copy_count"]() >= 0


def test_stub_declares_all_and_version():
    tree = _stub_tree()
    stub_all = None
    annotated = set()
    defined = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            stub_all = ast.literal_eval(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotated.add(node.target.id)
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined.add(node.name)
    assert stub_all is not None, "the stub has no __all__"
    assert sorted(stub_all) == sorted(cuframes.__all__)
    assert "__version__" in annotated
    for name in stub_all:
        assert name in defined or name in annotated, f"{name} in the stub's __all__ only"


@needs_class_signatures
@pytest.mark.parametrize("name", ["Publisher", "PacketPublisher"])
def test_publisher_classes_show_the_real_signature(name):
    cls = getattr(cuframes, name)
    base = getattr(_cuframes, name)
    assert cls is not base and issubclass(cls, base)
    sig = inspect.signature(cls)
    kinds = {p.kind for p in sig.parameters.values()}
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, sig
    assert inspect.Parameter.VAR_KEYWORD not in kinds, sig
    # The parameters are the Rust constructor's (its #[pyo3(signature)]), in its order.
    assert sig == inspect.signature(base)
    assert list(sig.parameters)[0] == "key"
    assert "runtime_dir" in sig.parameters
    init = inspect.signature(cls.__init__)
    assert list(init.parameters) == ["self", *sig.parameters]
    # help(): the class's own lines (its signature, its __init__) show the parameters; the
    # `__new__(*args, **kwargs) from builtins.type` pydoc lists for every extension class
    # (inherited from the base) is not ours.
    # (CPython 3.13's pydoc wraps a long signature, one parameter a line: joined here.)
    page = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    page = re.sub(r"([(,])\n[ |]*", r"\1 ", page).replace("( ", "(").splitlines()
    heads = [x for x in page if x.lstrip(" |").startswith((f"{name}(", "__init__("))]
    assert len(heads) == 2, heads
    for line in heads:
        assert "(key, " in line or "(self, /, key, " in line, line
        assert "*args" not in line and "**kwargs" not in line, line


@pytest.mark.parametrize("name", ["Publisher", "PacketPublisher"])
def test_publisher_classes_keep_the_extensions_docs(name):
    cls = getattr(cuframes, name)
    doc = cls.__doc__
    assert doc and doc == getattr(_cuframes, name).__doc__
    # Written for users: no word of how the binding is built.
    for internal in ("Arc", "Mutex", "the lock only", "pyo3", "*args"):
        assert internal not in doc, internal


def test_publisher_subclasses_still_register_for_the_exit_close(runtime_dir, key):
    with cuframes.Publisher(key, width=16, height=16) as p:
        assert p in cuframes._live_publishers
    with cuframes.PacketPublisher(key + "-pkt", codec="h264") as pp:
        assert pp in cuframes._live_publishers
