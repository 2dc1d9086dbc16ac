"""A KfDef file read and checked as strictly as the API server and the operator check it.

Two checks, every problem reported at once: the CRD's own schema (the copy shipped in the package:
unknown fields with their paths, types, required fields, patterns), as kube-apiserver applies it with
kubectl's default strict field validation; then :func:`~kfdef_operator.api.kfdef.parse_kfdef`, the
operator's own rules, with the messages the operator would put in the KfDef's status.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from kfdef_operator.api.crd import kfdef_crd
from kfdef_operator.api.kfdef import FieldError, InvalidKfDef, KfDef, parse_kfdef
from kfdef_operator.api.names import GROUP, KIND, SUPPORTED_API_VERSIONS, VERSION
from kfdef_operator.api.types import JSON
from kfdef_operator.build import safe_yaml
from kfdef_operator.cli.errors import BadInput
from kfdef_operator.ssa.schema import validate, version_schema

#: What to add to a problem the command line's own flags can solve.
FLAG_HINTS = {"metadata.name": "or pass --name NAME", "metadata.namespace": "or pass --namespace NAMESPACE"}


def read_kfdef(path: str) -> JSON:
    """The one KfDef document of a YAML file (``-``: stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not a text file") from None
    try:
        documents = [d for d in safe_yaml.load_all(text) if d is not None]  # nesting limited, as manifests are
    except yaml.YAMLError as exc:
        raise BadInput(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    kfdefs = [d for d in documents if isinstance(d, dict) and d.get("kind") == KIND]
    if len(kfdefs) != 1:
        raise BadInput(f"{path} must hold exactly one KfDef document, found {len(kfdefs)}")
    return kfdefs[0]


def schema_errors(document: JSON) -> list[FieldError]:
    """What the API server would refuse, checked against the schema of the document's apiVersion."""
    api_version = document.get("apiVersion") or f"{GROUP}/{VERSION}"
    if api_version not in SUPPORTED_API_VERSIONS:
        return []  # parse_kfdef names the supported versions
    schema = version_schema(kfdef_crd(), api_version.rpartition("/")[2])
    return [FieldError(path, message) for path, message in validate(document, schema or {})]


def check_kfdef(document: JSON, *, name: str | None = None, namespace: str | None = None) -> KfDef:
    """The document as the operator would see it, or :class:`InvalidKfDef` with every problem.

    A field the schema refuses is reported once, with the schema's message.
    """
    errors = schema_errors(document)
    try:
        kfdef = parse_kfdef(document, default_name=name, default_namespace=namespace)
    except InvalidKfDef as invalid:
        reported = {error.path for error in errors}
        errors.extend(error for error in invalid.errors if error.path not in reported)
    if errors:
        raise InvalidKfDef([_with_hint(error) for error in errors])
    return kfdef


def _with_hint(error: FieldError) -> FieldError:
    hint = FLAG_HINTS.get(error.path)
    return FieldError(error.path, f"{error.message}; {hint}") if hint and "is required" in error.message else error
