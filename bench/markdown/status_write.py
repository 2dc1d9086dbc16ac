"""What a status write costs kube-apiserver, by inventory format (``bench/status_write.py``; issue 26)."""

from __future__ import annotations

from ..results import Results
from ..tables import fmt


def status_write(results: Results) -> list[str]:
    return ["## What a status write costs kube-apiserver (issue 26)", "", *_status_write(results)]


def _status_write(results: Results) -> list[str]:
    strings = results.figures.get("status_write.strings.apiserver_cpu_ms")
    objects = results.figures.get("status_write.objects.apiserver_cpu_ms")
    took = {form: figure.median for form in ("strings", "objects")
            if (figure := results.figures.get(f"status_write.{form}.latency_ms")) is not None}
    if strings is None or objects is None or len(took) < 2:
        return ["Not measured in this session (`python -m bench.status_write` measures it alone)."]
    return [
        f"Measured in this session (`bench/status_write.py`): merge patches of `status.summary`, as the operator's "
        f"status writer sends one at each readiness change, to a KfDef holding the synthetic workload's inventory "
        f"({strings.note}). kube-apiserver used **{fmt(strings.median)} ms of CPU per write with the "
        f"inventory as strings** (what the operator writes) and {fmt(objects.median)} ms with an object per entry "
        f"(its first format; {(objects.note or '').split('; ')[0]}): {objects.median / strings.median:.1f} x as "
        f"much. Each write was answered in {fmt(took['strings'])} ms against {fmt(took['objects'])} ms (medians "
        f"of {strings.n} rounds).",
    ]
