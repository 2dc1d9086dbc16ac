"""Run ``kustomize build`` as a subprocess and parse the YAML stream it prints.

The binary is found in this order: ``$KFDEF_KUSTOMIZE`` (path to a kustomize binary), ``kustomize`` on
``PATH``, then ``kubectl kustomize`` (kubectl embeds kustomize). Output is parsed with libyaml's
``CSafeLoader`` when PyYAML has it (several times faster on large CRDs), else ``SafeLoader``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Mapping

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_STDERR_TAIL_LINES = 20

#: The file names kustomize reads as a directory's kustomization, in its order of preference.
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def is_remote(reference: str) -> bool:
    """Whether a kustomization's reference names something kustomize fetches (a URL or a git repo)."""
    return "://" in reference or reference.startswith(("github.com/", "git@"))


class KustomizeError(RuntimeError):
    """``kustomize build`` failed, timed out or printed something that is not a list of objects."""

    def __init__(self, message: str, *, path: Path, application: str | None = None, stderr_tail: str = ""):
        self.path = path
        self.application = application
        self.stderr_tail = stderr_tail
        where = f"application {application!r} ({path})" if application else str(path)
        text = f"kustomize build of {where} failed: {message}"
        if stderr_tail:
            text += f"\n{stderr_tail}"
        super().__init__(text)


def kustomize_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """The argv prefix that runs ``kustomize build`` (without the path)."""
    env = os.environ if environ is None else environ
    explicit = env.get("KFDEF_KUSTOMIZE")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise KustomizeError("KFDEF_KUSTOMIZE points at something that is not an executable file",
                                 path=Path(explicit))
        return [explicit, "build"]
    search_path = env.get("PATH", os.defpath)
    found = shutil.which("kustomize", path=search_path)
    if found:
        return [found, "build"]
    kubectl = shutil.which("kubectl", path=search_path)
    if kubectl:
        return [kubectl, "kustomize"]
    raise KustomizeError("no kustomize found: set KFDEF_KUSTOMIZE to a kustomize binary or put kustomize "
                         "(or kubectl) on PATH", path=Path("."))


def build(path: Path, *, load_restrictor_none: bool = False, timeout: float = 120,
          application: str | None = None) -> list[dict[str, Any]]:
    """Build the kustomization in ``path`` and return its objects in kustomize's output order.

    ``load_restrictor_none`` lets the kustomization load files outside its own directory (kfctl's stacks
    and v1.1+ builds relied on it). ``application`` only labels error messages.
    """
    argv = kustomize_command()
    if load_restrictor_none:
        argv.append("--load-restrictor=LoadRestrictionsNone")
    argv.append(str(path))
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise KustomizeError(f"timed out after {timeout:g}s", path=path, application=application,
                             stderr_tail=_tail(exc.stderr or b"")) from None
    if done.returncode != 0:
        raise KustomizeError(f"exit code {done.returncode}", path=path, application=application,
                             stderr_tail=_tail(done.stderr))
    return parse_objects(done.stdout, path=path, application=application)


def parse_objects(stream: bytes | str, *, path: Path, application: str | None = None) -> list[dict[str, Any]]:
    """Parse a YAML stream of objects, skipping empty documents."""
    try:
        documents = list(yaml.load_all(stream, Loader=SafeLoader))
    except yaml.YAMLError as exc:
        raise KustomizeError(f"output is not valid YAML: {exc}", path=path, application=application) from None
    objects = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise KustomizeError(f"document {index} of the output is a {type(doc).__name__}, not an object",
                                 path=path, application=application)
        objects.append(doc)
    return objects


def _tail(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return "\n".join(lines[-_STDERR_TAIL_LINES:])
