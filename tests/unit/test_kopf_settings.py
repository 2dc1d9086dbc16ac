"""What kopf is told to watch (controller.handlers.configure_kopf): KfDefs, and of the CRDs only the KfDef CRD."""

import kopf
from kopf._cogs.structs.references import Resource

from kfdef_operator.api.names import CRD_NAME, GROUP, PLURAL, VERSION
from kfdef_operator.controller.handlers import configure_kopf

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", kind="CustomResourceDefinition",
                namespaced=False)
KFDEFS = Resource(GROUP, VERSION, PLURAL, kind="KfDef", namespaced=True)


def selectors(settings: kopf.OperatorSettings, resource: Resource) -> tuple[list[str], list[str]]:
    """The label and field selectors of kopf's watch of ``resource`` (as kopf's watcher collects them)."""
    return (list(settings.watching.label_selectors.collect(resource)),
            list(settings.watching.field_selectors.collect(resource)))


def test_kopf_streams_only_the_kfdef_crd_of_all_crds():
    settings = kopf.OperatorSettings()
    configure_kopf(settings, frozenset(), "")
    assert selectors(settings, CRDS) == ([], [f"metadata.name={CRD_NAME}"])
    assert selectors(settings, KFDEFS) == ([], [])
    assert not settings.scanning.disabled  # all namespaces: the KfDef CRD's coming and going is still noticed


def test_a_shard_streams_its_kfdefs_and_named_namespaces_need_no_scanning():
    settings = kopf.OperatorSettings()
    configure_kopf(settings, frozenset({"team-a"}), "sharding.kubeflow.org/key=shard1")
    assert selectors(settings, KFDEFS) == (["sharding.kubeflow.org/key=shard1"], [])
    assert settings.scanning.disabled and not settings.posting.enabled
