"""The steps of one reconcile that ``bench/profile_apply.py`` times, by the labels its results carry
(``profile.apply.steps_s``), in the order the report's profile table shows them. A label indented with
``  of which:`` is part of the step above it. The report's notes read some of these steps by label, so both sides
take the labels from here."""

from __future__ import annotations

FETCH = "fetch sources"
RENDER_STEP = "render step (render, its cache entry)"
KUSTOMIZE = "  of which: render (kustomize)"    # only on a render-cache miss
DESIRE = "desired state (upgrade, settle)"
UPGRADE = "  of which: API-version upgrade check"
WATCHES = "start watches (list + sync)"
STAGES = "apply stages (sum)"
LIVE_LISTS = "  of which: live-metadata lists"
CUSTOM_RESOURCES = "custom resources, each after its CRD's Established wait"
STATUS_WRITES = "status writes"
EVENTS = "events"

STEP_LABELS = (FETCH, RENDER_STEP, KUSTOMIZE, DESIRE, UPGRADE, WATCHES, STAGES, LIVE_LISTS, CUSTOM_RESOURCES,
               STATUS_WRITES, EVENTS)
