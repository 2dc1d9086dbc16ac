"""Render a KfDef's applications into objects exactly as kfctl (v1.1+) did, but with today's kustomize.

Three modes, chosen per KfDef / application (reference sections 5 and 6):

* **legacy** (default): ``<repo>/<repoRef.path>`` is copied to ``<workdir>/kustomize/<app>/`` and a
  ``kustomization.yaml`` is generated there that merges ``base/`` and the named ``overlays/<name>/`` with
  kfctl's rules (``merge_package``), after rewriting their ``params.env`` files (``rewrite_params_env``).
* **plain**: the package has no ``base/kustomization.yaml`` but a root kustomization: a plain kustomize entry
  point, such as the ``example/`` folder of today's Kubeflow releases. It is built where it is, in the resolved
  repo, exactly as ``kustomize build <repo>/<path>`` builds it (default load restrictor: its own folder's files,
  other folders such as ``../common/...`` through their kustomizations), with nothing added. Objects without a
  namespace get the KfDef's namespace when the operator builds its desired state. Overlays and parameters are
  ignored, as kfctl did.
* **stacks**: an application named ``kubeflow-apps`` exists; every application gets a thin wrapper
  ``<workdir>/kustomize/<app>/kustomization.yaml`` whose only resource is the package (in the repo copy).
  No namespace, overlays or parameters.

Builds read only the tree the KfDef names (docs/security.md, "Builds"): the package copy in legacy mode, the
repository in plain mode (built in place) and stacks mode (its copy; kfctl's stacks reference files outside the
package), plus the generated wrappers. Copies keep symlinks, and one resolving outside the copy fails the render.
The render helper refuses every file outside those trees where kustomize reads it; before it runs,
``confinement.walk`` reads the kustomizations the build would follow, refuses remote references unless remote bases
are allowed, and records every reference, so that a path the helper refuses is named by its kustomization and field.
kustomize gets the load restrictor ``LoadRestrictionsRootOnly`` where that suffices (always for a plain entry point,
as ``kustomize build`` does) and ``LoadRestrictionsNone`` (which kfctl >= 1.1 always used) only where a reference
needs another directory of the tree. The operator's own reads and writes in the
copies stay inside them too: ``configurations:`` entries outside are left alone, json6902 patch paths outside fail
the render, and aggregated patch files get a safe file name.

kustomize v3.2 (kfctl's) vs v5, handled in the work-dir copy (the source cache is never modified):

* Top-level ``namespace:`` in v5 also renames ``Namespace`` objects; v3 did not. Every kustomization we
  generate sets its namespace through an explicit ``NamespaceTransformer`` (listed under ``transformers:``)
  whose only field spec is ``metadata/namespace`` (RoleBinding subjects are still updated, as in v3), so
  Namespace objects keep their names. A kustomization file of a copied package is rewritten the same way where
  a Namespace object of another name passes through it and the later transformer cannot break it (no
  ``replacements:``; see ``v3_namespace``); elsewhere v3 and v5 agree, or the file was written for v5. Stacks
  reference files anywhere in their repo, so in stacks mode each repo is copied whole to
  ``<workdir>/repos/<name>/`` (again only when its revision changes) and rewritten the same way.
* v5 fails on field-spec paths with numeric indexes (``containers/0/env/0/value``) in ``configurations``
  files; v3.2 silently skipped them, so we drop those entries from the copies (same result).
* ``bases:`` is deprecated in v5; generated kustomizations list them under ``resources:`` after the
  resources, which is where v3 and v5 put them when loading.

Deliberate deviations from kfctl:

* ``generateName`` in ``params.env`` gets 8 hex characters derived from the KfDef uid (or namespace/name)
  and the application name instead of random ones, so re-rendering is stable and does not churn objects.
* kfctl required ``base/`` to hold a file named like the first strategic-merge patch (kubeflow/kubeflow#3490);
  we do not.
* ``crds:`` paths of overlays are re-expressed relative to the package root like the other paths (kfctl
  left them unchanged, which could only fail).
* The work directory is always regenerated (kfctl skipped generation when ``kustomize/`` existed).
* A package with a root kustomization but no ``base/`` (kfctl: copied alone, ``namespace:`` set to the KfDef's
  when empty, built with v3) is a plain entry point: files outside its folder are available, objects that name
  a namespace keep it instead of being moved into the KfDef's, ServiceAccount subjects of role bindings are not
  given one, and a ``namespace:`` in the package renames Namespace objects (v5's meaning, which is what
  ``kustomize build`` gives).
* json6902 patch groups keep first-seen order (kfctl iterated a Go map: random order).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import hashlib
import logging
import os
import posixpath
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from kfdef_operator.api.kfdef import Application, KfDef, Parameter, project_of
from kfdef_operator.build import beneath, confinement, kustomize, safe_yaml, v3_namespace
from kfdef_operator.build.confinement import KUSTOMIZATION_FILES
from kfdef_operator.build.egress import EgressProxy, RemoteBases
from kfdef_operator.source.resolved import ResolvedSource

log = logging.getLogger(__name__)

Mode = Literal["legacy", "stacks", "plain"]
MODES: tuple[Mode, ...] = ("legacy", "stacks", "plain")
NAMESPACE_TRANSFORMER_FILE = "kfdef-namespace-transformer.yaml"
PARAMS_ENV = "params.env"
_AUTO_FILLED = ("appName", "namespace", "project")


@dataclass(frozen=True)
class RenderedApplication:
    """One application's objects, in kustomize's output order, with how long rendering took."""

    name: str
    mode: Mode
    objects: list[dict[str, Any]]
    seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    confinement: str = ""   # how the render helper was confined (kustomize.BuildOutput.confinement)


class RenderError(RuntimeError):
    """An application could not be rendered; ``application`` names it. ``subject`` replaces "application 'x'" at
    the start of the text when the failure is not one application's (a repository, the whole render)."""

    def __init__(self, application: str, message: str, *, subject: str | None = None):
        self.application = application
        self.message = message
        self.subject = subject
        super().__init__(f"{subject or f'application {application!r}'}: {message}")


# ---------------------------------------------------------------------------------------------------------
# Pure part: params.env rewriting and kfctl's kustomization merge, on text and dicts only.
# ---------------------------------------------------------------------------------------------------------

def generate_name_suffix(kfdef: KfDef, application: str) -> str:
    """8 hex characters standing in for kfctl's random ``generateName`` suffix, stable per KfDef and app."""
    identity = kfdef.uid or f"{kfdef.namespace}/{kfdef.name}"
    return hashlib.sha256(f"{identity}:{application}".encode()).hexdigest()[:8]


def rewrite_params_env(text: str, parameters: Sequence[Parameter], *, app_name: str, namespace: str,
                       project: str, generate_name_suffix: str) -> str:
    """kfctl's ``params.env`` rewrite (reference 5.2).

    A line whose key has a parameter with a non-empty value becomes ``key=value`` (``generateName`` gets
    ``generate_name_suffix`` appended when the file's value is empty). Otherwise ``appName``, ``namespace``
    and ``project`` are overwritten with the KfDef's name, namespace and GCP project. Parameters the file does
    not mention are dropped; every line is written back newline-terminated.
    """
    values = {p.name: p.value for p in parameters}
    auto = {"appName": app_name, "namespace": namespace, "project": project}
    lines = []
    for line in text.splitlines():
        key, _, current = line.partition("=")
        value = values.get(key, "")
        if value:
            if key == "generateName" and current == "":
                value += generate_name_suffix
            line = f"{key}={value}"
        elif key in auto:
            line = f"{key}={auto[key]}"
        lines.append(line + "\n")
    return "".join(lines)


@dataclass
class MergedPackage:
    """The generated kustomization (kfctl's form: ``bases:`` and ``namespace:`` kept) plus side files.

    ``json6902_files`` maps each aggregated patch file to the patch files (relative to the package root)
    concatenated into it, in order.
    """

    kustomization: dict[str, Any]
    json6902_files: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _rebase(child_dir: str, reference: str) -> str:
    """A path written in ``child_dir``'s kustomization, re-expressed relative to the package root."""
    if confinement.is_remote(reference) or "\n" in reference:  # remote targets and inline patches stay as they are
        return reference
    return posixpath.normpath(posixpath.join(child_dir, reference))


class _KustomizationMerger:
    """kfctl's ``MergeKustomization``: folds base and overlay kustomizations into one parent."""

    _LIST_FIELDS = ("bases", "resources", "crds", "images", "vars", "configMapGenerator", "secretGenerator",
                    "patchesStrategicMerge", "patchesJson6902", "configurations")

    def __init__(self) -> None:
        self.parent: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                       "namespace": "", "namePrefix": "", "nameSuffix": "", "commonLabels": {},
                                       "commonAnnotations": {}, "generatorOptions": None}
        for name in self._LIST_FIELDS:
            self.parent[name] = []
        self.seen: dict[str, set[str]] = {name: set() for name in self._LIST_FIELDS}
        self.warnings: list[str] = []

    def _add_once(self, list_field: str, key: str, value: Any) -> bool:
        if key in self.seen[list_field]:
            return False
        self.seen[list_field].add(key)
        self.parent[list_field].append(value)
        return True

    def merge(self, child_dir: str, child: Mapping[str, Any]) -> None:
        if child.get("bases") is None:
            # No bases: the child directory itself becomes a base and nothing else of it is merged.
            self._add_once("bases", child_dir, child_dir)
            return
        for base in child["bases"]:
            if not self._add_once("bases", _rebase(child_dir, base), _rebase(child_dir, base)):
                self.seen["bases"].add(child_dir)
        for key in ("namePrefix", "nameSuffix"):
            if child.get(key) and not self.parent[key]:
                self.parent[key] = child[key]
        for key in ("commonLabels", "commonAnnotations"):
            self.parent[key].update(child.get(key) or {})
        if child.get("generatorOptions") and self.parent["generatorOptions"] is None:
            self.parent["generatorOptions"] = copy.deepcopy(child["generatorOptions"])
        for list_field in ("resources", "patchesStrategicMerge", "configurations", "crds"):
            for reference in child.get(list_field) or ():
                rebased = _rebase(child_dir, reference)
                self._add_once(list_field, rebased, rebased)
        for list_field in ("images", "vars"):
            for entry in child.get(list_field) or ():
                if not self._add_once(list_field, entry.get("name", ""), copy.deepcopy(entry)):
                    self.warnings.append(f"ignoring {list_field[:-1]} {entry.get('name')!r} of {child_dir}: "
                                         "an earlier kustomization already set it")
        for entry in child.get("configMapGenerator") or ():
            self._merge_generator("configMapGenerator", child_dir, entry, self._config_map_args(child_dir, entry))
        for entry in child.get("secretGenerator") or ():
            self._merge_generator("secretGenerator", child_dir, entry, self._secret_args(child_dir, entry))
        for patch in child.get("patchesJson6902") or ():
            merged = {"target": copy.deepcopy(patch.get("target") or {})}
            if patch.get("path"):
                merged["path"] = _rebase(child_dir, patch["path"])
            elif patch.get("patch"):
                merged["patch"] = patch["patch"]
            key = f"{merged.get('path', merged.get('patch'))}-{merged['target'].get('name', '')}"
            self._add_once("patchesJson6902", key, merged)

    @staticmethod
    def _rebased_sources(child_dir: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """kfctl's ``updateGeneratorArgs``: env files rebased; every ``files`` item overwrites ``env`` (a bug
        kept for fidelity: a ``files:`` list ends up as one env file)."""
        args: dict[str, Any] = {}
        if entry.get("envs"):
            args["envs"] = [_rebase(child_dir, e) for e in entry["envs"]]
        if entry.get("env"):
            args["env"] = _rebase(child_dir, entry["env"])
        for file_source in entry.get("files") or ():
            args["env"] = _rebase(child_dir, file_source.rpartition("=")[2])
        if entry.get("literals"):
            args["literals"] = list(entry["literals"])
        return args

    def _config_map_args(self, child_dir: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        args = {"name": entry.get("name", "")}
        if entry.get("namespace"):
            args["namespace"] = entry["namespace"]
        args.update(self._rebased_sources(child_dir, entry))
        return args

    def _secret_args(self, child_dir: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        args = copy.deepcopy(dict(entry))
        args.pop("env", None)
        args.pop("envs", None)
        args.update(self._rebased_sources(child_dir, entry))
        return args

    def _merge_generator(self, list_field: str, child_dir: str, entry: Mapping[str, Any],
                         args: dict[str, Any]) -> None:
        behavior = (entry.get("behavior") or "").lower()
        name = args.get("name", "")
        if behavior == "create":
            args["behavior"] = "create"
            if not self._add_once(list_field, name, args):
                self.warnings.append(f"ignoring {list_field} {name!r} of {child_dir}: already created")
            return
        args["behavior"] = behavior if behavior in ("merge", "replace") else "unspecified"
        self.seen[list_field].add(name)
        self.parent[list_field].append(args)


def merge_package(base: Mapping[str, Any] | None, overlays: Sequence[tuple[str, Mapping[str, Any]]],
                  parameters: Sequence[Parameter], default_namespace: str) -> MergedPackage:
    """kfctl's ``MergeKustomizations`` + namespace defaulting (reference 5.1), on parsed kustomizations.

    ``base`` is ``base/kustomization.yaml`` (None when absent); ``overlays`` are ``(name, kustomization)`` of
    ``overlays/<name>/`` in the KfDef's order.
    """
    merger = _KustomizationMerger()
    if base is not None:
        merger.merge("base", base)
    for parameter in parameters:
        if parameter.name == "namespace":
            merger.parent["namespace"] = parameter.value
    for name, overlay in overlays:
        merger.merge(f"overlays/{name}", overlay)
    json6902_files = _aggregate_json6902(merger.parent)
    if not merger.parent["namespace"]:
        merger.parent["namespace"] = default_namespace
    kustomization = {k: v for k, v in merger.parent.items() if v not in ("", None, [], {})}
    return MergedPackage(kustomization, json6902_files, merger.warnings)


_PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def aggregated_patch_file(key: str) -> str:
    """The file name of a json6902 patch group: kfctl's ``<name>-<Kind>.yaml`` when that is a plain file name,
    else (a target name with ``/``, ``..`` or other characters no Kubernetes name has) one derived from a digest,
    so the file is always written in the package directory itself."""
    if _PLAIN_FILE_NAME.fullmatch(key) and ".." not in key:
        return f"{key}.yaml"
    return f"json6902-{hashlib.sha256(key.encode()).hexdigest()[:16]}.yaml"


def _aggregate_json6902(parent: dict[str, Any]) -> dict[str, list[str]]:
    """Step 6: one patch entry and one concatenated file (``aggregated_patch_file``) per target name and kind."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for patch in parent["patchesJson6902"]:
        target = patch["target"]
        groups.setdefault(f"{target.get('name', '')}-{target.get('kind', '')}", []).append(patch)
    parent["patchesJson6902"] = [{"target": patches[0]["target"], "path": aggregated_patch_file(key)}
                                 for key, patches in groups.items()]
    return {aggregated_patch_file(key): [p["path"] for p in patches if "path" in p] for key, patches in groups.items()}


def namespace_transformer(namespace: str) -> dict[str, Any]:
    """A NamespaceTransformer that sets ``metadata.namespace`` but, unlike v5's default, leaves the names
    of Namespace objects alone (kustomize v3 behaviour)."""
    return {"apiVersion": "builtin", "kind": "NamespaceTransformer",
            "metadata": {"name": "kfdef-namespace", "namespace": namespace},
            "fieldSpecs": [{"path": "metadata/namespace", "create": True}]}


def namespace_as_transformer(kustomization: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Move ``namespace:`` into a transformer (returned, to be written to ``NAMESPACE_TRANSFORMER_FILE``)."""
    result = dict(kustomization)
    namespace = result.pop("namespace", None)
    if not namespace:
        return result, None
    result["transformers"] = list(result.get("transformers") or []) + [NAMESPACE_TRANSFORMER_FILE]
    return result, namespace_transformer(namespace)


def for_kustomize_v5(kustomization: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Rewrite a generated v3-era kustomization for v5: ``bases:`` move to the end of ``resources:`` and
    ``namespace:`` becomes a transformer (``namespace_as_transformer``)."""
    result = dict(kustomization)
    bases = result.pop("bases", None) or []
    if bases:
        result["resources"] = list(result.get("resources") or []) + list(bases)
    return namespace_as_transformer(result)


_NUMERIC_SEGMENT = re.compile(r"(^|/)\d+(/|$)")


def drop_numeric_field_specs(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Drop field specs whose path has a numeric index (v3.2 skipped them, v5 fails on them).

    ``config`` is a transformer configuration (``configurations:`` file); returns it and the dropped paths.
    """
    result: dict[str, Any] = {}
    dropped: list[str] = []
    for key, specs in config.items():
        if key == "nameReference" and isinstance(specs, list):
            result[key] = []
            for reference in specs:
                reference = dict(reference)
                kept = _keep_specs(reference.get("fieldSpecs") or [], dropped)
                reference["fieldSpecs"] = kept
                result[key].append(reference)
        elif isinstance(specs, list):
            result[key] = _keep_specs(specs, dropped)
        else:
            result[key] = specs
    return result, dropped


def _keep_specs(specs: Iterable[Any], dropped: list[str]) -> list[Any]:
    kept = []
    for spec in specs:
        path = spec.get("path", "") if isinstance(spec, Mapping) else ""
        if _NUMERIC_SEGMENT.search(path):
            dropped.append(path)
        else:
            kept.append(spec)
    return kept


# ---------------------------------------------------------------------------------------------------------
# Files and subprocesses.
# ---------------------------------------------------------------------------------------------------------

def render(kfdef: KfDef, sources: Mapping[str, ResolvedSource], workdir: Path, *, max_workers: int = 4,
           progress: Callable[[RenderedApplication], None] | None = None, timeout: float = 120,
           helper: kustomize.RenderHelper | None = None,
           remote_bases: RemoteBases | None = None) -> list[RenderedApplication]:
    """Render every application of ``kfdef`` (in parallel) and return them in spec order.

    ``sources`` maps repo names to resolved local trees; ``workdir`` is this KfDef's private work directory
    (its ``kustomize/`` and kustomize's ``home/`` are recreated). ``progress`` is called as each application
    finishes. ``helper`` is the render helper to run (default: ``kustomize.find_render_helper()``);
    ``remote_bases`` lets kustomizations name remote bases and URLs, fetched under its address policy (refused when
    None, the default). The helper reads nothing outside the application's tree and generated directory, whatever
    the kustomizations say.
    Raises ``RenderError`` naming the first failing application in spec order (and how many others failed).
    """
    workdir = Path(workdir).resolve()
    for sub in ("kustomize", "home"):
        shutil.rmtree(workdir / sub, ignore_errors=True)
    (workdir / "kustomize").mkdir(parents=True)
    helper = helper or kustomize.find_render_helper()

    if kfdef.uses_stacks:
        sources = {name: _stacks_copy(source, workdir, _entry_paths(kfdef, name)) for name, source in sources.items()}

    def one(app: Application) -> RenderedApplication:
        started = time.monotonic()
        mode, build_dir, tree, warnings = _prepare(kfdef, app, sources, workdir)
        output = _build(app, mode, build_dir, _roots(app, mode, build_dir, tree), workdir, helper=helper,
                        remote_bases=remote_bases, timeout=timeout)
        result = RenderedApplication(app.name, mode, output.objects, time.monotonic() - started,
                                     (*warnings, *output.notes), output.confinement)
        if progress:
            progress(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="render") as pool:
        futures = [pool.submit(one, app) for app in kfdef.applications]
    results, failures = [], []
    for app, future in zip(kfdef.applications, futures, strict=True):
        error = future.exception()
        if error is None:
            results.append(future.result())
        else:
            failures.append((app.name, error))
    if failures:
        name, error = failures[0]
        message = _describe(error)
        if len(failures) > 1:
            message += f" (and {len(failures) - 1} more failed: {', '.join(n for n, _ in failures[1:])})"
        raise RenderError(name, message) from error
    return results


def _describe(error: BaseException) -> str:
    if isinstance(error, RenderError):
        return error.message
    if isinstance(error, (kustomize.KustomizeError, OSError)):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _roots(app: Application, mode: Mode, build_dir: Path, tree: Path) -> dict[Path, str]:
    """The directories the build of ``build_dir`` may read, by the names people know them by: ``tree`` (the
    package or repository copy) and, when outside it, the generated ``build_dir``."""
    ref = app.kustomize_config.repo_ref  # type: ignore[union-attr]
    roots = {tree: f"{ref.name}:{ref.path.rstrip('/')}/" if mode == "legacy" else f"{ref.name}:"}
    if not confinement.inside(build_dir.resolve(), tree.resolve()):
        roots[build_dir] = f"(generated for {app.name})/"
    return roots


def _confine(app: Application, mode: Mode, build_dir: Path, roots: Mapping[Path, str],
             allow_remote: bool) -> tuple[str, confinement.Walk]:
    """The load restrictor for building ``build_dir``, and the walk of its kustomizations (``confinement.walk``);
    raises ``RenderError`` listing what the walk refused. A plain entry point always gets kustomize's default,
    ``LoadRestrictionsRootOnly``."""
    found = confinement.walk(build_dir, roots, allow_remote=allow_remote)
    if found.violations:
        shown = "; ".join(str(v) for v in found.violations[:5])
        more = f" (and {len(found.violations) - 5} more)" if len(found.violations) > 5 else ""
        raise RenderError(app.name, f"refused to build: {shown}{more}")
    return confinement.LOAD_RESTRICTIONS_ROOT_ONLY if mode == "plain" else found.load_restrictor, found


def _build(app: Application, mode: Mode, build_dir: Path, roots: Mapping[Path, str], workdir: Path, *,
           helper: kustomize.RenderHelper, remote_bases: RemoteBases | None, timeout: float) -> kustomize.BuildOutput:
    """Build ``build_dir`` with the render helper, reading nothing outside ``roots`` and, when remote bases are
    allowed, connecting through a proxy of this build alone. A path the helper refused is named by the
    kustomization and field that lead there, when the walk found them; a connection the proxy refused by why."""
    restrictor, found = _confine(app, mode, build_dir, roots, remote_bases is not None)
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(EgressProxy(remote_bases)) if remote_bases is not None else None
        try:
            return kustomize.build(build_dir, roots=roots, helper=helper, home=workdir / "home",
                                   load_restrictor=restrictor, remote_proxy=proxy.url if proxy else None,
                                   kustomize_v3=mode != "plain", timeout=timeout, application=app.name)
        except kustomize.KustomizeError as error:
            if proxy is not None and proxy.refusals:
                more = f" (and {len(proxy.refusals) - 1} more)" if len(proxy.refusals) > 1 else ""
                raise RenderError(app.name, f"refused to fetch a remote base or URL: {proxy.refusals[0]}{more}"
                                  ) from error
            named = found.explain(error.refusal.path) if error.refusal else None
            if named is None:
                raise
            raise RenderError(app.name, f"refused to build: {named}") from error


def _prepare(kfdef: KfDef, app: Application, sources: Mapping[str, ResolvedSource],
             workdir: Path) -> tuple[Mode, Path, Path, list[str]]:
    """Write the kustomization(s) for ``app``; return its mode, the directory to build, the tree the build may
    read (the package or repository copy) and warnings."""
    if app.kustomize_config is None:
        raise RenderError(app.name, "has no kustomizeConfig")
    ref = app.kustomize_config.repo_ref
    source = sources.get(ref.name)
    if source is None:
        raise RenderError(app.name, f"repo {ref.name!r} was not resolved")
    package = _package_dir(app, source)
    app_dir = workdir / "kustomize" / app.name
    if kfdef.uses_stacks:
        _write_yaml(app_dir / "kustomization.yaml", {
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(package, app_dir)]})
        return "stacks", app_dir, source.local_path, []
    if not _has_kustomization(package / "base"):
        if not _has_kustomization(package):
            raise RenderError(app.name, f"{ref.name}:{ref.path} has neither base/kustomization.yaml nor a "
                                        "kustomization.yaml; check repoRef.path")
        return "plain", package, source.local_path, []
    _copy_tree(package, app_dir, app.name, f"{ref.name}:{ref.path.rstrip('/')}/")
    warnings = _make_copy_v5_compatible(app_dir, app.name)
    base = _read_kustomization(app_dir / "base", app.name)
    assert base is not None
    _write_legacy_kustomization(kfdef, app, app_dir, base, warnings)
    return "legacy", app_dir, app_dir, warnings


def _has_kustomization(directory: Path) -> bool:
    return any((directory / name).is_file() for name in KUSTOMIZATION_FILES)


def _entry_paths(kfdef: KfDef, repo: str) -> list[str]:
    """The ``repoRef.path`` of every application rendered from ``repo``."""
    return [app.kustomize_config.repo_ref.path for app in kfdef.applications
            if app.kustomize_config is not None and app.kustomize_config.repo_ref.name == repo]


def _stacks_copy(source: ResolvedSource, workdir: Path, paths: Sequence[str]) -> ResolvedSource:
    """``source`` copied to ``<workdir>/repos/<name>/`` and made v5-compatible for the entry points ``paths``:
    stacks reference files all over the repo, so the whole tree is copied. Reused while the revision and the
    entry points are unchanged."""
    target = workdir / "repos" / source.name
    marker = target / ".kfdef-revision"
    stamp = "\n".join([source.revision, *sorted(set(paths))])
    if not (marker.is_file() and marker.read_text() == stamp):
        shutil.rmtree(target, ignore_errors=True)
        _copy_tree(source.local_path, target, source.name, f"{source.name}:", subject=f"repo {source.name!r}")
        for warning in _make_copy_v5_compatible(target, source.name, [target / path for path in paths]):
            log.warning("repo %s: %s", source.name, warning)
        marker.write_text(stamp)
    return dataclasses.replace(source, local_path=target)


def _copy_failure(error: OSError, source: Path, application: str, shown_as: str, subject: str | None) -> RenderError:
    """The file a copy could not read or write, named as people know it; a file over the render's file-size limit
    (RLIMIT_FSIZE) keeps that cause, so the limit is reported."""
    path = Path(error.filename or source)
    name = path.relative_to(source).as_posix() if path.is_relative_to(source) else path.name
    too_large = error.errno == errno.EFBIG
    failure = RenderError(application, f"cannot copy {shown_as}{name}: "
                                       f"{'file too large' if too_large else error.strerror}", subject=subject)
    failure.__cause__ = OSError(errno.EFBIG, "File too large") if too_large else None
    return failure


MAX_COPIED_ENTRIES = 100_000
"""Most files and directories a package or repository copy may hold (the source limit per archive)."""


def _copy_tree(source: Path, target: Path, application: str, shown_as: str, *, subject: str | None = None) -> None:
    """Copy ``source`` to ``target`` keeping symlinks (``beneath.copy_tree``: nothing swapped for a symlink during
    the copy takes it outside ``source``). Fails, leaving no copy behind, when the tree holds more than
    :data:`MAX_COPIED_ENTRIES` entries, something other than files, directories and symlinks, or a symlink resolving
    outside the copy."""
    copied = 0

    def count(names: list[str]) -> None:
        nonlocal copied
        copied += len(names)
        if copied > MAX_COPIED_ENTRIES:
            raise RenderError(application, f"{shown_as} holds more than {MAX_COPIED_ENTRIES} files and directories",
                              subject=subject)

    try:
        try:
            beneath.copy_tree(source, target, count)
        except OSError as error:
            raise _copy_failure(error, source, application, shown_as, subject)  # noqa: B904 (cause set there)
        escaping = [f"{shown_as}{link.relative_to(target).as_posix()} -> {link_target}"
                    for link, link_target in confinement.escaping_symlinks(target)]
        if escaping:
            raise RenderError(application, "symlinks lead outside the tree the KfDef names: "
                                           + ", ".join(escaping[:5])
                                           + (f" (and {len(escaping) - 5} more)" if len(escaping) > 5 else ""),
                              subject=subject)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _package_dir(app: Application, source: ResolvedSource) -> Path:
    ref = app.kustomize_config.repo_ref  # type: ignore[union-attr]
    root = source.local_path.resolve()
    package = (root / ref.path).resolve()
    if package != root and root not in package.parents:
        raise RenderError(app.name, f"repoRef.path {ref.path!r} leaves repo {ref.name!r}")
    if not package.is_dir():
        raise RenderError(app.name, f"repoRef.path {ref.path!r} does not exist in repo {ref.name!r} "
                                    f"({source.uri} at {source.revision[:12]})")
    return package


def _write_legacy_kustomization(kfdef: KfDef, app: Application, app_dir: Path, base: Mapping[str, Any],
                                warnings: list[str]) -> None:
    config = app.kustomize_config
    assert config is not None
    overlays = []
    for index, name in enumerate(config.overlays):
        overlay_dir = app_dir / "overlays" / name
        if not overlay_dir.is_dir():
            available = sorted(p.name for p in (app_dir / "overlays").glob("*") if p.is_dir())
            field = f"spec.applications[{kfdef.applications.index(app)}].kustomizeConfig.overlays[{index}]"
            raise RenderError(app.name, f"overlay {name!r} does not exist in {config.repo_ref.path}/overlays/ "
                                        f"(available: {', '.join(available) or 'none'}); fix {field}")
        overlay = _read_kustomization(overlay_dir, app.name)
        if overlay is None:
            raise RenderError(app.name, f"overlay {name!r} has no kustomization.yaml")
        overlays.append((name, overlay))
    for directory in [app_dir / "base"] + [app_dir / "overlays" / name for name, _ in overlays]:
        params_file = directory / PARAMS_ENV
        if params_file.is_file():
            _write_text(params_file, rewrite_params_env(
                params_file.read_text(), config.parameters, app_name=kfdef.name, namespace=kfdef.namespace,
                project=project_of(kfdef), generate_name_suffix=generate_name_suffix(kfdef, app.name)))
    merged = merge_package(base, overlays, config.parameters, kfdef.namespace)
    warnings.extend(merged.warnings)
    for aggregated, parts in merged.json6902_files.items():
        contents = []
        for part in parts:
            try:
                with open(app_dir / part, "rb", opener=beneath.opener([app_dir])) as patch:
                    contents.append(patch.read())
            except beneath.Outside:
                raise RenderError(app.name, f"patchesJson6902 path {part!r} leads outside {config.repo_ref.path}; "
                                            "a patch must be a file of the package") from None
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                pass  # kfctl skipped a patch file that is not there
        _detach(app_dir / aggregated)
        with open(app_dir / aggregated, "ab") as out:  # kfctl appended, so a file already there is kept
            out.writelines(contents)
    _write_kustomization_for_v5(app_dir, merged.kustomization)


def _write_kustomization_for_v5(directory: Path, kustomization: Mapping[str, Any]) -> None:
    converted, transformer = for_kustomize_v5(kustomization)
    if transformer is not None:
        _write_yaml(directory / NAMESPACE_TRANSFORMER_FILE, transformer)
    _write_yaml(directory / "kustomization.yaml", converted)


def _make_copy_v5_compatible(root: Path, application: str, entry_points: Sequence[Path] | None = None) -> list[str]:
    """Rewrite the kustomization files of a copied tree for v5 (see module docstring): every one under ``root``,
    or only those the builds of ``entry_points`` read. Every decision is taken before the first rewrite."""
    tree = v3_namespace.KustomizationTree(root)
    directories = tree.everywhere() if entry_points is None else tree.reachable(entry_points)
    rewrite = set(v3_namespace.to_rewrite(tree, directories))
    warnings: list[str] = []
    for directory in directories:
        path, kustomization = tree.kustomization(directory)  # type: ignore[misc]  # listed: it has one
        for config_name in kustomization.get("configurations") or ():
            if isinstance(config_name, str):
                warnings.extend(_sanitize_configuration(directory / config_name, root))
        if directory in rewrite:
            converted, transformer = namespace_as_transformer(kustomization)
            _write_yaml(directory / NAMESPACE_TRANSFORMER_FILE, transformer)
            _write_yaml(path, converted)
    return warnings


def _sanitize_configuration(path: Path, app_dir: Path) -> list[str]:
    """Drop the numeric field specs of the ``configurations:`` file at ``path`` in the copy ``app_dir``. A file
    outside the copy is never read or written (the render helper refuses it where kustomize reads it)."""
    try:
        config = safe_yaml.read_file(path, opener=beneath.opener([app_dir]))
    except (beneath.Outside, FileNotFoundError, IsADirectoryError, NotADirectoryError, yaml.YAMLError):
        return []  # kustomize reports it when a build uses it
    if not isinstance(config, Mapping):
        return []
    cleaned, dropped = drop_numeric_field_specs(config)
    if not dropped:
        return []
    _write_yaml(path, cleaned)
    return [f"{path.relative_to(app_dir)}: dropped field specs with numeric indexes (kustomize v3 ignored "
            f"them, v5 rejects them): {', '.join(dropped)}"]


def _read_kustomization(directory: Path, application: str) -> dict[str, Any] | None:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            try:
                loaded = safe_yaml.read_file(path)
            except safe_yaml.YamlLimitError as exc:
                raise RenderError(application, f"{path.name} in {directory.name}/ is refused: {exc}") from None
            except yaml.YAMLError as exc:
                raise RenderError(application, f"{path.name} in {directory.name}/ is not valid YAML: {exc}") from None
            if loaded is None:
                return {}
            if not isinstance(loaded, dict):
                raise RenderError(application, f"{path.name} in {directory.name}/ is not a kustomization (a YAML "
                                               "object)")
            binary = safe_yaml.binary_field(loaded)
            if binary is not None:
                raise RenderError(application, f"{path.name} in {directory.name}/ is refused: {binary} is a "
                                               "!!binary value, which kustomize would read as text")
            return loaded
    return None


def _write_yaml(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_text(path, yaml.dump(data, Dumper=safe_yaml.SafeDumper, sort_keys=False, default_flow_style=False))


def _write_text(path: Path, text: str) -> None:
    """Write ``path`` in a copy; a symlink there is replaced, never written through (its target may be another
    file of the copy, which must keep its own content)."""
    if path.is_symlink():
        path.unlink()
    path.write_text(text)


def _detach(path: Path) -> None:
    """Turn a symlink at ``path`` into a regular file with the same content, so appending does not reach its
    target."""
    if path.is_symlink():
        content = path.read_bytes() if path.exists() else b""
        path.unlink()
        path.write_bytes(content)
