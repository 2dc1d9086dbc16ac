"""The operator's container image without a container engine: what its Dockerfile sets up, reproduced for an
operator process run on this machine (the kustomize and OLM install tests run the Deployment's pod this way,
since kwok only pretends to run it)."""

from __future__ import annotations

import re

from tests.commands import ROOT
from tests.unit.test_dockerfile import DOCKERFILE, parse, stages


def image_layout() -> tuple[str, str, dict[str, str]]:
    """Where the Dockerfile's final stage copies the demo manifests from and to, and the ENV it sets."""
    final = stages(parse(DOCKERFILE.read_text()))[-1]
    (source, destination), = [i.args.split() for i in final
                               if i.keyword == "COPY" and i.args.startswith("kfdefs/demo/manifests")]
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(i.args for i in final if i.keyword == "ENV")))
    return source, destination, env


def as_in_the_image() -> tuple[str, ...]:
    """A wrapper running the operator where the image's paths exist: /opt is a tmpfs of its own mount namespace."""
    source, destination, _ = image_layout()
    top = "/" + destination.split("/")[1]
    script = (f"mount -t tmpfs tmpfs {top} && mkdir -p {destination} && "
              f"mount --bind {ROOT / source} {destination} && exec \"$@\"")
    return ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "as-in-the-image")
