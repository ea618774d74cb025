"""The exception tree of rwrouter.errors: each class, its bases, the status a refusal answers;
and no exception class elsewhere in the package outside it, except the documented few."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from rwrouter import errors
from rwrouter.errors import (
    AnswerError,
    CaptureError,
    ConfigError,
    ConfigErrors,
    CredentialsError,
    DecodeError,
    InvariantError,
    ListenError,
    PrometheusNotFoundError,
    QueueInUseError,
    RedirectError,
    RequestError,
    RwrouterError,
    SeriesError,
    SlowBodyError,
    StorageError,
    TenantError,
    TooLargeError,
    TransportError,
    UnsupportedError,
    WorkspaceBackendError,
)

PACKAGE = Path(errors.__file__).resolve().parent

TREE: list[tuple[type[BaseException], tuple[type[BaseException], ...], int | None]] = [
    # class, its bases (in order), the status it answers (a RequestError) or None
    (RwrouterError, (Exception,), None),
    (ConfigError, (RwrouterError,), None),
    (ConfigErrors, (ConfigError,), None),
    (RequestError, (RwrouterError,), 400),
    (DecodeError, (RequestError,), 400),
    (TenantError, (RequestError,), 400),
    (SlowBodyError, (RequestError,), 408),
    (TooLargeError, (RequestError,), 413),
    (UnsupportedError, (RequestError,), 415),
    (CredentialsError, (RwrouterError,), None),
    (StorageError, (RwrouterError,), None),
    (QueueInUseError, (RwrouterError, OSError), None),
    (ListenError, (RwrouterError, OSError), None),
    (TransportError, (RwrouterError,), None),
    (CaptureError, (RwrouterError, ValueError), None),
    (SeriesError, (RwrouterError, ValueError), None),
    (WorkspaceBackendError, (RwrouterError,), None),
    (AnswerError, (RwrouterError, ValueError), None),
    (RedirectError, (RwrouterError,), None),
    (PrometheusNotFoundError, (RwrouterError, RuntimeError), None),
    (InvariantError, (RuntimeError,), None),  # a bug: deliberately not an RwrouterError
]


@pytest.mark.parametrize(("cls", "bases", "status"), TREE, ids=[cls.__name__ for cls, _, _ in TREE])
def test_tree(
    cls: type[BaseException], bases: tuple[type[BaseException], ...], status: int | None
) -> None:
    assert cls.__bases__ == bases
    assert cls.__module__ == "rwrouter.errors"
    assert cls.__doc__  # who raises it, and what is answered
    assert getattr(cls, "status", None) == status
    assert issubclass(cls, RequestError) == (status is not None)


def test_the_table_has_every_class_of_the_module() -> None:
    defined = {
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseException)
        and obj.__module__ == "rwrouter.errors"
    }
    assert defined == {cls for cls, _, _ in TREE}


def test_the_docstring_draws_every_class() -> None:
    doc = errors.__doc__ or ""
    assert [cls.__name__ for cls, _, _ in TREE if cls.__name__ not in doc] == []


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (QueueInUseError, "queue directory q is in use"),
        (CaptureError, "not a capture file"),
        (SeriesError, "unexpected '}' at 3"),
        (PrometheusNotFoundError, "no prometheus"),
    ],
    ids=[
        "queue_in_use_is_an_oserror",
        "capture_is_a_valueerror",
        "series_is_a_valueerror",
        "prometheus_not_found_is_a_runtimeerror",
    ],
)
def test_the_builtin_bases_still_catch(cls: type[RwrouterError], message: str) -> None:
    builtin = cls.__bases__[1]
    with pytest.raises(builtin, match=message):
        raise cls(message)
    with pytest.raises(RwrouterError, match=message):
        raise cls(message)


def test_config_error_names_the_key_path() -> None:
    error = ConfigError("remote_write[1].url", "not a URL")
    assert (str(error), error.path, error.reason) == (
        "remote_write[1].url: not a URL",
        "remote_write[1].url",
        "not a URL",
    )
    assert str(ConfigError("", "empty file")) == "empty file"


# Control flow that never leaves the package (documented in rwrouter.errors): not errors.
CONTROL_FLOW = {
    "pipeline/fanout.py": {"Stale"},
    "send/stopping.py": {"HandedOver"},
    "server/decoders.py": {"Busy"},
    "server/bodies.py": {"ClientGone", "ReadWaitTimeout"},
    "server/frontdoor.py": {"Refused"},
}
BUILTIN_EXCEPTIONS = {
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def exception_classes(source: str) -> set[str]:
    """Classes of a module whose base is a built-in exception or a name ending in Error or
    Exception (what an exception class looks like without importing the module)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
            if name in BUILTIN_EXCEPTIONS or name.endswith(("Error", "Exception")):
                found.add(node.name)
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("class A(ValueError): pass", {"A"}),
        ("class B(errors.RwrouterError): pass", {"B"}),
        ("class C(MyError): pass", {"C"}),
        ("class D(Base): pass", set()),
        ("def f():\n    class E(Exception): pass", {"E"}),
    ],
    ids=["builtin_base", "attribute_base", "error_named_base", "plain_class", "nested"],
)
def test_exception_classes_finder(source: str, expected: set[str]) -> None:
    assert exception_classes(source) == expected


def test_no_exception_class_outside_errors_py() -> None:
    outside, control_flow = {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "errors.py" or path.name.endswith("_pb2.py"):
            continue
        found = exception_classes(path.read_text(encoding="utf-8"))
        allowed = CONTROL_FLOW.get(rel, set())
        if found & allowed:
            control_flow[rel] = found & allowed
        if found - allowed:
            outside[rel] = sorted(found - allowed)
    assert outside == {}, "define exceptions in rwrouter/errors.py (and draw them in its tree)"
    assert control_flow == CONTROL_FLOW  # moved or gone: update the list and errors' docstring


def test_config_errors_flatten_and_keep_each_line() -> None:
    a, b, c = ConfigError("x", "one"), ConfigError("y.z", "two"), ConfigError("", "three")
    nested = ConfigErrors([a, ConfigErrors([b, c])])
    assert nested.errors == (a, b, c)
    assert (nested.path, nested.reason) == ("x", "one")
    assert str(nested) == "x: one; y.z: two; three"
    assert ConfigErrors.of([a]) is a


def test_config_errors_of_nothing_is_a_bug() -> None:
    with pytest.raises(InvariantError):
        ConfigErrors([])
