"""Typed, validated KfDef (``kfdef.apps.kubeflow.org``, kfctl's API), parsed from a plain dict.

Pure: no I/O. ``parse_kfdef`` turns the dict the API server (or a YAML file) gives us into frozen
dataclasses and reports *every* problem it finds at once, each with the field path that holds it
(``spec.applications[3].kustomizeConfig.repoRef.name``), so one round trip fixes a KfDef.

Deliberate differences from kfctl:

* kfctl required a repo named ``manifests`` in every KfDef, used or not. We do not: only repos that
  applications name must exist.
* In ``v1beta1`` an application may omit ``name`` (kfctl's CLI accepted that); we then name it after the
  last segment of its ``repoRef.path``. In ``v1`` the name is required.
* Parameter values must be strings. Unquoted ``OFF``/``true`` are YAML booleans; we refuse them with a hint
  instead of guessing a spelling. Integers and floats are taken as their decimal text.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kfdef_operator.api.names import GROUP, KIND, SUPPORTED_API_VERSIONS

#: An application with this name switches the whole KfDef to kfctl's "stacks" rendering.
STACKS_APPLICATION = "kubeflow-apps"

#: URI schemes ``sources`` can fetch; a URI without a scheme is a local path.
SUPPORTED_URI_SCHEMES = ("https", "http", "file", "git+https", "git+ssh", "git+http", "git+file")

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class FieldError:
    """One problem in a KfDef: where it is (a dotted field path) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidKfDef(ValueError):
    """The KfDef cannot be used; ``errors`` lists every problem found."""

    def __init__(self, errors: list[FieldError]):
        self.errors = list(errors)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "invalid KfDef: " + "; ".join(str(e) for e in self.errors)


@dataclass(frozen=True)
class RepoRef:
    """A package directory: ``path`` (relative, no ``..``) inside the repo called ``name``."""

    name: str
    path: str


@dataclass(frozen=True)
class Parameter:
    """A ``params.env`` value for one application (a parameter named ``namespace`` also sets its namespace)."""

    name: str
    value: str


@dataclass(frozen=True)
class KustomizeConfig:
    repo_ref: RepoRef
    overlays: tuple[str, ...] = ()
    parameters: tuple[Parameter, ...] = ()


@dataclass(frozen=True)
class Application:
    """One package to render and apply; ``kustomize_config`` is None only while reporting its absence."""

    name: str
    kustomize_config: KustomizeConfig | None


@dataclass(frozen=True)
class Repo:
    """Where manifests come from; ``uri`` forms are described in ``sources``."""

    name: str
    uri: str


@dataclass(frozen=True)
class Secret:
    """A named secret; exactly one of ``literal_value`` / ``env_name`` (an operator env var) is set."""

    name: str
    literal_value: str | None = None
    env_name: str | None = None


@dataclass(frozen=True)
class Plugin:
    kind: str
    name: str
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KfDef:
    name: str
    namespace: str
    applications: tuple[Application, ...]
    repos: tuple[Repo, ...]
    plugins: tuple[Plugin, ...] = ()
    secrets: tuple[Secret, ...] = ()
    version: str = ""
    generation: int = 0
    uid: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: ``spec.interval``: seconds between resyncs (None: the operator's default). Flux's name.
    interval: float | None = None
    #: ``spec.force``: re-create objects of any kind whose immutable fields changed. Flux's name.
    force: bool = False
    #: ``spec.serviceAccountName``: the ServiceAccount, in the KfDef's own namespace, whose identity applies,
    #: heals, prunes and deletes the stack ("": the operator's default). Flux's name.
    service_account_name: str = ""

    @property
    def uses_stacks(self) -> bool:
        """kfctl >= 1.1 renders every application as a thin stack wrapper when one is named ``kubeflow-apps``."""
        return any(app.name == STACKS_APPLICATION for app in self.applications)

    def repo(self, name: str) -> Repo:
        return next(r for r in self.repos if r.name == name)


class _Collector:
    """Accumulates field errors while the parser walks the dict."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.add(path, f"must be an object, got {type(value).__name__}")
            return {}
        return value

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, f"must be a list, got {type(value).__name__}")
            return []
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str:
        if value is None or value == "":
            if required:
                self.add(path, "is required")
            return ""
        if isinstance(value, bool):
            self.add(path, f"must be a string, got boolean {str(value).lower()} (quote it: YAML reads unquoted "
                           "OFF/ON/yes/no/true/false as booleans)")
            return ""
        if isinstance(value, (int, float)):
            return str(value)
        if not isinstance(value, str):
            self.add(path, f"must be a string, got {type(value).__name__}")
            return ""
        return value


def parse_kfdef(obj: Mapping[str, Any], *, default_name: str | None = None,
                default_namespace: str | None = None) -> KfDef:
    """Validate a KfDef dict and return it typed; raise ``InvalidKfDef`` listing all problems.

    ``default_name``/``default_namespace`` fill in a missing ``metadata.name``/``metadata.namespace``
    (upstream example KfDefs have no name; the CLI lets the user supply one).
    """
    c = _Collector()
    if not isinstance(obj, Mapping):
        raise InvalidKfDef([FieldError("<root>", f"must be an object, got {type(obj).__name__}")])
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version not in SUPPORTED_API_VERSIONS:
        c.add("apiVersion", f"unsupported {api_version!r}; expected one of {', '.join(SUPPORTED_API_VERSIONS)}")
    if obj.get("kind") not in (None, KIND):
        c.add("kind", f"must be {KIND}, got {obj.get('kind')!r}")
    names_required = api_version != f"{GROUP}/v1beta1"

    meta = c.mapping(obj.get("metadata"), "metadata")
    name = c.string(meta.get("name"), "metadata.name") or (default_name or "")
    if not name:
        c.add("metadata.name", "is required (upstream example KfDefs have none: set one, e.g. kubeflow)")
    elif not _is_dns_label(name):
        c.add("metadata.name", f"{name!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
                               "at most 63 characters, starting and ending with a letter or digit)")
    namespace = c.string(meta.get("namespace"), "metadata.namespace") or (default_namespace or "")
    if not namespace:
        c.add("metadata.namespace", "is required: it is the default target namespace of the applications")
    elif not _is_dns_label(namespace):
        c.add("metadata.namespace", f"{namespace!r} is not a DNS-1123 label")

    spec = c.mapping(obj.get("spec"), "spec")
    repos = _parse_repos(c, spec.get("repos"))
    known_repos = {r.name for r in repos}
    applications = _parse_applications(c, spec.get("applications"), known_repos, names_required)
    plugins = _parse_plugins(c, spec.get("plugins"))
    secrets = _parse_secrets(c, spec.get("secrets"))
    version = c.string(spec.get("version"), "spec.version")
    interval = _parse_interval(c, spec.get("interval"))
    force = spec.get("force", False)
    if not isinstance(force, bool):
        c.add("spec.force", f"must be true or false, got {force!r}")
    service_account = _parse_service_account_name(c, spec.get("serviceAccountName"))
    annotations = c.mapping(meta.get("annotations"), "metadata.annotations")

    generation = meta.get("generation") or 0
    if c.errors:
        raise InvalidKfDef(c.errors)
    return KfDef(name=name, namespace=namespace, applications=applications, repos=repos, plugins=plugins,
                 secrets=secrets, version=version, generation=int(generation), uid=str(meta.get("uid") or ""),
                 annotations={str(k): str(v) for k, v in annotations.items()}, interval=interval, force=force is True,
                 service_account_name=service_account)


def service_account_name(obj: Mapping[str, Any]) -> str:
    """``spec.serviceAccountName`` of a KfDef dict ("" when unset), however invalid the rest of it is.

    Teardown needs the stack's identity even for a KfDef that no longer
    parses; a value that is not a ServiceAccount name raises
    :class:`InvalidKfDef` (never an empty name: that would mean the operator's
    own identity).
    """
    c = _Collector()
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    name = _parse_service_account_name(c, spec.get("serviceAccountName") if isinstance(spec, Mapping) else None)
    if c.errors:
        raise InvalidKfDef(c.errors)
    return name


def _parse_service_account_name(c: _Collector, raw: Any) -> str:
    name = c.string(raw, "spec.serviceAccountName")
    problem = service_account_name_problem(name) if name else None
    if problem:
        c.add("spec.serviceAccountName", problem)
    return name


def service_account_name_problem(name: str) -> str | None:
    """Why ``name`` is not the name of a ServiceAccount of the KfDef's own namespace, or None."""
    if ":" in name or "/" in name:
        return (f"{name!r} names another namespace; only a ServiceAccount of the KfDef's own namespace can be named "
                "(just its name)")
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        return (f"{name!r} is not a ServiceAccount name (lower-case letters, digits, '-' and '.', at most 253 "
                "characters)")
    return None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
MIN_INTERVAL_S = 10.0


def parse_duration(text: str) -> float:
    """A Go/Kubernetes duration (``10m``, ``1h30m``, ``90s``) in seconds; ValueError when it is not one."""
    parts = _DURATION_PART.findall(text)
    if not text or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as 10m, 1h30m or 90s")
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def _parse_interval(c: _Collector, raw: Any) -> float | None:
    if raw is None:
        return None
    text = c.string(raw, "spec.interval")
    if not text:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as error:
        c.add("spec.interval", str(error))
        return None
    if seconds < MIN_INTERVAL_S:
        c.add("spec.interval", f"{text} is shorter than the minimum of {MIN_INTERVAL_S:.0f}s")
        return None
    return seconds


def _is_dns_label(value: str) -> bool:
    return len(value) <= 63 and bool(_DNS1123_LABEL.fullmatch(value))


def _parse_repos(c: _Collector, raw: Any) -> tuple[Repo, ...]:
    repos: list[Repo] = []
    seen: set[str] = set()
    for i, item in enumerate(c.sequence(raw, "spec.repos")):
        path = f"spec.repos[{i}]"
        entry = c.mapping(item, path)
        name = c.string(entry.get("name"), f"{path}.name", required=True)
        uri = c.string(entry.get("uri"), f"{path}.uri", required=True)
        if name and name in seen:
            c.add(f"{path}.name", f"duplicate repo name {name!r}")
        seen.add(name)
        if uri:
            problem = uri_problem(uri)
            if problem:
                c.add(f"{path}.uri", problem)
        repos.append(Repo(name, uri))
    return tuple(repos)


def uri_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be fetched by ``sources``, or None if its form is supported."""
    scheme = urlsplit(uri).scheme.lower()
    if not scheme or (len(scheme) == 1 and uri[1:2] == ":"):  # a path (or a Windows drive letter)
        return None
    if scheme not in SUPPORTED_URI_SCHEMES:
        return (f"unsupported URI scheme {scheme!r}; use https://, http://, file:, git+https://, git+ssh://, "
                "git+file:// or a local path")
    if scheme.startswith("git+") or scheme in ("http", "https"):
        if not urlsplit(uri).netloc and scheme != "git+file":
            return f"{scheme} URI has no host"
    return None


def _parse_applications(c: _Collector, raw: Any, known_repos: set[str],
                        names_required: bool) -> tuple[Application, ...]:
    apps: list[Application] = []
    seen: set[str] = set()
    for i, item in enumerate(c.sequence(raw, "spec.applications")):
        path = f"spec.applications[{i}]"
        entry = c.mapping(item, path)
        config = _parse_kustomize_config(c, entry.get("kustomizeConfig"), f"{path}.kustomizeConfig", known_repos)
        name = c.string(entry.get("name"), f"{path}.name", required=names_required)
        if not name and not names_required and config is not None:
            name = posixpath.basename(posixpath.normpath(config.repo_ref.path))
        if name:
            if name in seen:
                c.add(f"{path}.name", f"duplicate application name {name!r}")
            elif not _is_dns_label(name):
                c.add(f"{path}.name", f"{name!r} is not a DNS-1123 label (it names a directory and the "
                                      "objects' application label)")
            seen.add(name)
        apps.append(Application(name, config))
    return tuple(apps)


def _parse_kustomize_config(c: _Collector, raw: Any, path: str, known_repos: set[str]) -> KustomizeConfig | None:
    if raw is None:
        c.add(path, "is required: every application names a repoRef (repo and path) to render")
        return None
    entry = c.mapping(raw, path)
    ref = c.mapping(entry.get("repoRef"), f"{path}.repoRef")
    if not ref:
        c.add(f"{path}.repoRef", "is required")
    repo_name = c.string(ref.get("name"), f"{path}.repoRef.name", required=bool(ref))
    if repo_name and repo_name not in known_repos:
        listed = ", ".join(sorted(known_repos)) or "none"
        c.add(f"{path}.repoRef.name", f"names repo {repo_name!r}, which spec.repos does not list (listed: {listed})")
    repo_path = c.string(ref.get("path"), f"{path}.repoRef.path", required=bool(ref))
    if repo_path:
        problem = relative_path_problem(repo_path)
        if problem:
            c.add(f"{path}.repoRef.path", problem)
    overlays = []
    for j, overlay in enumerate(c.sequence(entry.get("overlays"), f"{path}.overlays")):
        overlay_name = c.string(overlay, f"{path}.overlays[{j}]", required=True)
        if overlay_name and ("/" in overlay_name or overlay_name in (".", "..")):
            c.add(f"{path}.overlays[{j}]", f"{overlay_name!r} must be a directory name under overlays/")
        overlays.append(overlay_name)
    parameters = []
    for j, item in enumerate(c.sequence(entry.get("parameters"), f"{path}.parameters")):
        p = c.mapping(item, f"{path}.parameters[{j}]")
        parameters.append(Parameter(c.string(p.get("name"), f"{path}.parameters[{j}].name", required=True),
                                    c.string(p.get("value"), f"{path}.parameters[{j}].value")))
    return KustomizeConfig(RepoRef(repo_name, repo_path), tuple(overlays), tuple(parameters))


def relative_path_problem(path: str) -> str | None:
    """Why ``path`` is not a path inside a repo (absolute, or ``..`` leaving it), or None."""
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return f"{path!r} must be relative to the repo root, not absolute"
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        return f"{path!r} leaves the repo (..)"
    return None


def _parse_plugins(c: _Collector, raw: Any) -> tuple[Plugin, ...]:
    plugins = []
    for i, item in enumerate(c.sequence(raw, "spec.plugins")):
        path = f"spec.plugins[{i}]"
        entry = c.mapping(item, path)
        kind = c.string(entry.get("kind"), f"{path}.kind", required=True)
        name = c.string(c.mapping(entry.get("metadata"), f"{path}.metadata").get("name"), f"{path}.metadata.name")
        plugins.append(Plugin(kind, name, dict(c.mapping(entry.get("spec"), f"{path}.spec"))))
    return tuple(plugins)


def _parse_secrets(c: _Collector, raw: Any) -> tuple[Secret, ...]:
    secrets = []
    for i, item in enumerate(c.sequence(raw, "spec.secrets")):
        path = f"spec.secrets[{i}]"
        entry = c.mapping(item, path)
        name = c.string(entry.get("name"), f"{path}.name", required=True)
        source = c.mapping(entry.get("secretSource"), f"{path}.secretSource")
        literal = c.mapping(source.get("literalSource"), f"{path}.secretSource.literalSource")
        env = c.mapping(source.get("envSource"), f"{path}.secretSource.envSource")
        literal_value = c.string(literal.get("value"), f"{path}.secretSource.literalSource.value") if literal else None
        env_name = c.string(env.get("name"), f"{path}.secretSource.envSource.name", required=bool(env)) if env else None
        if (literal_value is None) == (env_name is None):
            c.add(f"{path}.secretSource", "needs exactly one of literalSource or envSource")
        secrets.append(Secret(name, literal_value, env_name))
    return tuple(secrets)


def project_of(kfdef: KfDef) -> str:
    """The GCP project (a ``KfGcpPlugin``'s ``spec.project``), which kfctl auto-filled as ``project=``."""
    for plugin in kfdef.plugins:
        project = plugin.spec.get("project")
        if plugin.kind == "KfGcpPlugin" and isinstance(project, str):
            return project
    return ""
