"""The operator's settings: what ``kfdef-operator run`` decided from its flags and environment, fixed at start."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.source.options import FetchOptions


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings (``kfdef-operator run`` flags)."""

    work_dir: Path
    fetch_options: FetchOptions = field(default_factory=FetchOptions.from_env)
    api_upgrade_default: str = "auto"
    concurrency: int = 24                 # objects applied in parallel per KfDef
    health_timeout: float = 300.0         # unhealthy this long after an apply: Degraded
    interval: float = 600.0               # default resync interval (spec.interval overrides)
    namespaces: frozenset[str] = frozenset()  # a namespace-scoped operator holds objects only there
    work_threads: int = 4                 # fetches and renders in parallel, across KfDefs
    renderer: IsolatedRender = field(default_factory=IsolatedRender)  # each render in a limited child process
    teardown_wave_timeout: float = 60.0
    #: The ServiceAccount (in its own namespace) a KfDef without spec.serviceAccountName acts as; "" for the
    #: operator's own identity (Flux's --default-service-account).
    default_service_account: str = ""
