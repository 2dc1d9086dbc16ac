"""The KfDef CRD, shipped inside the package.

``kfdef_crd.yaml`` next to this module is a copy of ``crds/kfdef.apps.kubeflow.org_kfdefs.yaml`` (what
``deploy/`` and the OLM bundle install), so that a ``kfdef-operator`` installed from a wheel, which has no
``crds/`` folder, validates KfDef files against the very schema the API server enforces.
``make crd-package-data`` refreshes the copy; ``tests/unit/test_crd_schema.py`` fails while they differ.
"""

from __future__ import annotations

import functools
from importlib import resources

import yaml

from kfdef_operator.api.types import JSON

PACKAGED_CRD = "kfdef_crd.yaml"


@functools.cache
def kfdef_crd() -> JSON:
    """The KfDef CustomResourceDefinition as a dict (parsed once)."""
    text = resources.files(__package__).joinpath(PACKAGED_CRD).read_text(encoding="utf-8")
    crd: JSON = yaml.safe_load(text)
    return crd
