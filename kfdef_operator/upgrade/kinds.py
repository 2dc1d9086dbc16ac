"""Conversions of the built-in kinds other than CRDs and webhook configurations (pure).

* Deployment from extensions/v1beta1: ``revisionHistoryLimit`` and ``progressDeadlineSeconds`` 2147483647 (keep
  every ReplicaSet, no progress deadline), RollingUpdate ``maxUnavailable: 1`` and ``maxSurge: 1``; from
  apps/v1beta1: ``revisionHistoryLimit: 2``. DaemonSet from extensions/v1beta1 and StatefulSet from apps/v1beta1:
  ``updateStrategy.type: OnDelete``. These are the values the server stored when it still served the old version,
  so objects created back then do not change. Workloads get ``spec.selector.matchLabels`` from the pod template
  labels when absent (the old versions defaulted it the same way, so the immutable selector stays equal);
  ``spec.rollbackTo`` and ``spec.templateGeneration`` are dropped.
* PodDisruptionBudget policy/v1beta1 -> v1: an empty selector matched no pods in v1beta1 but matches every pod of
  the namespace in v1; it is removed, because an absent selector matches no pods in both versions.
* Ingress -> networking.k8s.io/v1: ``backend`` -> ``defaultBackend``, ``serviceName``/``servicePort`` ->
  ``service: {name, port: {number|name}}``, ``pathType: ImplementationSpecific`` (the v1beta1 behaviour) when absent.
* HorizontalPodAutoscaler autoscaling/v2beta1 -> v2: metric targets become ``target: {type, value|averageValue|
  averageUtilization}``, ``metricName``/``selector`` become ``metric: {name, selector}``.
* RBAC v1alpha1 subjects' ``apiVersion`` becomes ``apiGroup``; EndpointSlice v1beta1 ``topology`` becomes
  ``nodeName``/``zone``; RuntimeClass v1alpha1 ``spec`` fields move to the top level; PriorityLevelConfiguration
  ``assuredConcurrencyShares`` becomes ``nominalConcurrencyShares``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kfdef_operator.upgrade.conversion import JsonObject, NotConvertible, fill_missing

# Defaults of removed workload versions that differ from apps/v1, by (old apiVersion, kind).
_OLD_WORKLOAD_DEFAULTS: Mapping[tuple[str, str], Mapping[str, Any]] = {
    ("extensions/v1beta1", "Deployment"): {
        "revisionHistoryLimit": 2147483647, "progressDeadlineSeconds": 2147483647,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}},
    },
    ("apps/v1beta1", "Deployment"): {"revisionHistoryLimit": 2},
    ("extensions/v1beta1", "DaemonSet"): {"updateStrategy": {"type": "OnDelete"}},
    ("apps/v1beta1", "StatefulSet"): {"updateStrategy": {"type": "OnDelete"}},
}


def convert_workload(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.setdefault("spec", {})
    if "selector" not in spec:
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if not labels:
            raise NotConvertible("apps/v1 requires spec.selector and the pod template has no labels to derive it from")
        spec["selector"] = {"matchLabels": dict(labels)}
    spec.pop("rollbackTo", None)
    spec.pop("templateGeneration", None)
    defaults = _OLD_WORKLOAD_DEFAULTS.get((obj["apiVersion"], obj["kind"]), {})
    if (spec.get("strategy") or {}).get("type") == "Recreate":  # rollingUpdate is invalid with Recreate
        defaults = {key: value for key, value in defaults.items() if key != "strategy"}
    fill_missing(spec, defaults)
    return ()


def _service_port(port: int | str) -> JsonObject:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return {"number": int(port)}
    return {"name": port}


def _ingress_backend_v1(backend: JsonObject) -> JsonObject:
    if "serviceName" not in backend:
        return backend  # a resource backend keeps its shape
    converted = {key: value for key, value in backend.items() if key not in ("serviceName", "servicePort")}
    converted["service"] = {"name": backend["serviceName"], "port": _service_port(backend.get("servicePort", 80))}
    return converted


def convert_ingress(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if "backend" in spec:
        spec["defaultBackend"] = _ingress_backend_v1(spec.pop("backend"))
    for rule in spec.get("rules") or []:
        for path in (rule.get("http") or {}).get("paths") or []:
            path.setdefault("pathType", "ImplementationSpecific")
            if "backend" in path:
                path["backend"] = _ingress_backend_v1(path["backend"])
    return ()


_RBAC_GROUP_SUBJECTS = ("User", "Group")


def convert_rbac(obj: JsonObject) -> tuple[str, ...]:
    for subject in obj.get("subjects") or []:
        subject.pop("apiVersion", None)  # v1alpha1 only; v1 identifies the subject's group by apiGroup
        if subject.get("kind") in _RBAC_GROUP_SUBJECTS:
            subject.setdefault("apiGroup", "rbac.authorization.k8s.io")
    return ()


def convert_pod_disruption_budget(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if "selector" not in spec:
        return ()
    selector = spec["selector"] or {}
    if selector.get("matchLabels") or selector.get("matchExpressions"):
        return ()
    del spec["selector"]
    return ("empty selector removed: it matched no pods in policy/v1beta1 but would match every pod in policy/v1",)


# autoscaling/v2beta1 target fields in precedence order -> (v2 target type, v2 target field)
_HPA_V2BETA1_TARGETS = (("targetAverageUtilization", "Utilization", "averageUtilization"),
                        ("averageValue", "AverageValue", "averageValue"),
                        ("targetAverageValue", "AverageValue", "averageValue"),
                        ("targetValue", "Value", "value"))
_HPA_METRIC_SOURCES = ("resource", "containerResource", "pods", "object", "external")


def _hpa_metric_source_v2(source: JsonObject) -> JsonObject:
    converted: JsonObject = {key: source[key] for key in ("name", "container") if key in source}
    if "target" in source:  # object metrics: v2beta1's target is the described object
        converted["describedObject"] = source["target"]
    if "metricName" in source:
        converted["metric"] = {"name": source["metricName"]}
        selector = source.get("selector", source.get("metricSelector"))
        if selector is not None:
            converted["metric"]["selector"] = selector
    for old_field, target_type, new_field in _HPA_V2BETA1_TARGETS:
        if old_field in source:
            converted["target"] = {"type": target_type, new_field: source[old_field]}
            break
    return converted


def convert_hpa(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if obj["apiVersion"] == "autoscaling/v2beta1":
        for metric in spec.get("metrics") or []:
            for key in _HPA_METRIC_SOURCES:
                if key in metric:
                    metric[key] = _hpa_metric_source_v2(metric[key])
    return ()


_TOPOLOGY_FIELDS = {"kubernetes.io/hostname": "nodeName", "topology.kubernetes.io/zone": "zone"}


def convert_endpoint_slice(obj: JsonObject) -> tuple[str, ...]:
    dropped: set[str] = set()
    for endpoint in obj.get("endpoints") or []:
        for key, value in (endpoint.pop("topology", None) or {}).items():
            if key in _TOPOLOGY_FIELDS:
                endpoint.setdefault(_TOPOLOGY_FIELDS[key], value)
            else:
                dropped.add(key)
    return (f"topology keys without a v1 field dropped: {', '.join(sorted(dropped))}",) if dropped else ()


def convert_runtime_class(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.pop("spec", None)
    if spec is not None:  # node.k8s.io/v1alpha1 nested the fields under spec
        if "runtimeHandler" in spec:
            obj["handler"] = spec["runtimeHandler"]
        for key in ("overhead", "scheduling"):
            if key in spec:
                obj[key] = spec[key]
    return ()


def convert_priority_level(obj: JsonObject) -> tuple[str, ...]:
    limited = (obj.get("spec") or {}).get("limited")
    if limited:
        shares = limited.pop("assuredConcurrencyShares", None) or limited.pop("nominalConcurrencyShares", None)
        # The betas defaulted 0 or absent to 30; v1 takes an explicit 0 literally, so only a real value is written.
        if shares:
            limited["nominalConcurrencyShares"] = shares
    return ()
