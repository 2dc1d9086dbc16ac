"""Read a build's kustomizations before kustomize runs: the choices the operator makes for the build, and the
friendly names of what the render helper refuses.

kustomize follows references from a kustomization to other files and directories: bases, resources and components,
patches, generator sources, ``configurations``, ``crds``, ``replacements``, ``openapi``, and the files named by
plugin configurations under ``generators``/``transformers``/``validators``. The boundary is the render helper: it
refuses every file outside the build's trees where kustomize reads it (``tools/kfdef-render/internal/confinedfs``).
:func:`walk` reads every kustomization reachable from the one to build (and every plugin configuration it lists),
never one outside the roots, and

* picks kustomize's load restrictor: the stricter ``LoadRestrictionsRootOnly`` (each kustomization reads files only
  below its own directory) unless a reference of the tree needs another directory of the roots;
* records every reference with the field naming it, so that a path the helper refused is named by the field and
  kustomization that lead there (:meth:`Walk.explain`);
* refuses what the operator never lets kustomize do, with the field named: a remote reference (a git repository
  spec or an http(s) URL) unless remote bases are allowed (Flux's ``--no-remote-bases``; refused by default here),
  and even then one not fetched over http(s) (:func:`unfetchable_remote`),
  helm, a ``!!binary`` value (which kustomize reads as text), a directory listed as a generator/transformer/validator
  (its plugin configurations could be patched into reading anything), an unreadable or oversized kustomization and
  a referenced file over :data:`MAX_FILE_BYTES`.

Everything here only reads files.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kfdef_operator.build import beneath, safe_yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
LOAD_RESTRICTIONS_NONE = "LoadRestrictionsNone"
LOAD_RESTRICTIONS_ROOT_ONLY = "LoadRestrictionsRootOnly"

MAX_FILE_BYTES = 256 * 1024 * 1024
"""Largest file a build may reference (the source limit per file)."""
MAX_KUSTOMIZATIONS = 10_000
"""Most kustomizations one build may reach (Kubeflow v1.2.0's whole repository holds 420)."""

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*(://|::)|https?:)", re.IGNORECASE)
_SCP_USER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*@")
_GIT_PREFIXES = ("gh:", "github.com/", "github.com:")
_BASE_FIELDS = ("resources", "bases", "components")
_HELM_FIELDS = ("helmCharts", "helmChartInflationGenerator", "helmGlobals")
_PLUGIN_FIELDS = ("generators", "transformers", "validators")


@dataclass(frozen=True)
class Violation:
    """One reference a build may not follow: where it is written and what is wrong with it."""

    kustomization: str   # the file naming it, as shown to people (see :func:`walk`'s ``roots``)
    field: str           # e.g. ``configMapGenerator[0].files[1]``
    reference: str       # as written ('' for problems of the file itself)
    problem: str

    def __str__(self) -> str:
        what = f"{self.field} {self.reference!r}" if self.reference else self.field
        return f"{self.kustomization}: {what} {self.problem}" if what else f"{self.kustomization}: {self.problem}"


@dataclass(frozen=True)
class Reference:
    """A local path named in a kustomization: where it is written, and where kustomize reads it (the kustomization's
    directory joined with the reference, cleaned as kustomize cleans it, symlinks not followed)."""

    kustomization: str
    field: str
    reference: str
    target: str


OUTSIDE = "leads outside the repository tree the KfDef names"


@dataclass
class Walk:
    """What :func:`walk` found."""

    violations: list[Violation] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    kustomizations: int = 0
    files_outside_own_directory: bool = False   # LoadRestrictionsRootOnly would refuse the build

    @property
    def load_restrictor(self) -> str:
        """The strictest kustomize load restrictor the build works with (meaningful only without violations)."""
        return LOAD_RESTRICTIONS_NONE if self.files_outside_own_directory else LOAD_RESTRICTIONS_ROOT_ONLY

    def explain(self, refused: str) -> Violation | None:
        """The reference that leads kustomize to the path ``refused`` (the render helper's refusal): the one
        naming exactly that path, else one naming a directory above it; None when no kustomization read here names
        it (a key in another case, which kustomize matches and this walk does not)."""
        path = os.path.normpath(refused)
        named = (next((r for r in self.references if r.target == path), None)
                 or next((r for r in self.references if path.startswith(r.target.rstrip("/") + "/")), None))
        return Violation(named.kustomization, named.field, named.reference, OUTSIDE) if named else None


def is_remote(reference: str) -> bool:
    """Whether kustomize would fetch ``reference`` over the network (or clone it with git) instead of reading a
    local path: any ``scheme://`` URL (http(s) files; ``https://``, ``ssh://``, ``file://`` git repositories),
    go-getter's ``git::`` (any ``x::``), ``http:``/``https:`` without slashes, ``user@host:path`` and
    ``github.com/...`` repository specs. Errs towards "remote"."""
    return bool(_URL.match(reference) or _SCP_USER.match(reference)) or reference.lower().startswith(_GIT_PREFIXES)


def unfetchable_remote(reference: str) -> str | None:
    """Why the remote ``reference`` is refused even with remote bases allowed, or None: only https (and http, where
    the operator allows it) go through the build's proxy and its address policy. A ``file://`` repository would be
    cloned from the operator's own disk (its git mirror holds other tenants' repositories), and ssh or git://
    connections cannot be checked."""
    scheme = reference.lower().removeprefix("git::")
    if scheme.startswith("file:"):
        return ("names a repository on the operator's own disk (file://), which remote bases may never read; fetch "
                "it over https://")
    if scheme.startswith(("ssh://", "git://")) or _SCP_USER.match(scheme):
        return ("is fetched over ssh or git://, whose connections the operator cannot check; remote bases are "
                "fetched over https:// only")
    return None


def inside(path: Path, root: Path) -> bool:
    """Whether the already-resolved ``path`` is ``root`` or below it."""
    return path == root or root in path.parents


def path_segment(value: str) -> str:
    """``value`` when it is usable as one file or directory name (no separator, NUL, ``.`` or ``..``), else
    ``ValueError``. KfDef names and namespaces are DNS labels, so this only guards the work directory's layout
    against a bug elsewhere turning them into a traversal."""
    if not value or value in (".", "..") or "/" in value or "\0" in value:
        raise ValueError(f"{value!r} cannot be used as a file name")
    return value


def escaping_symlinks(root: Path) -> Iterator[tuple[Path, str]]:
    """Symlinks below ``root`` that resolve outside it, as (link, its target as written); directory links are
    not descended into."""
    real_root = root.resolve()
    for directory, dirs, files in os.walk(root):
        for name in files + dirs:
            path = Path(directory, name)
            if path.is_symlink() and not inside(Path(os.path.realpath(path)), real_root):
                yield path, os.readlink(path)


def walk(entry: Path, roots: Mapping[Path, str], *, allow_remote: bool = False) -> Walk:
    """Read every kustomization reachable from the kustomization directory ``entry`` (see the module docstring).

    ``roots`` maps each directory the build may read to the name people know it by (``manifests:apps/``); files
    are shown in violations by that name. Kustomizations outside the roots are never read.
    """
    return _Walker(roots, allow_remote).run(entry)


class _Walker:
    def __init__(self, roots: Mapping[Path, str], allow_remote: bool) -> None:
        self.roots = {Path(os.path.realpath(root)): label for root, label in roots.items()}
        self.opener = beneath.opener(list(self.roots))  # the walk's own reads: the kernel keeps them in the roots
        self.allow_remote = allow_remote
        self.result = Walk()
        self.seen: set[Path] = set()
        self.pending: deque[Path] = deque()

    def run(self, entry: Path) -> Walk:
        self._enqueue(Path(os.path.realpath(entry)))
        while self.pending:
            directory = self.pending.popleft()
            if len(self.seen) > MAX_KUSTOMIZATIONS:
                self._add(self._name(directory), "", "", f"reaches more than {MAX_KUSTOMIZATIONS} kustomizations")
                break
            self._kustomization(directory)
        return self.result

    # --- names and bookkeeping -------------------------------------------------------------------------------

    def _name(self, path: Path) -> str:
        for root, label in sorted(self.roots.items(), key=lambda item: -len(str(item[0]))):
            if inside(path, root):
                relative = path.relative_to(root).as_posix()
                return label + ("" if relative == "." else relative)
        return "(outside the build)"

    def _add(self, kustomization: str, field_name: str, reference: str, problem: str) -> None:
        self.result.violations.append(Violation(kustomization, field_name, reference, problem))

    def _within_roots(self, path: Path) -> Path | None:
        """``path`` with its symlinks resolved, when that is inside a root; None otherwise (the helper refuses
        it where kustomize reads it)."""
        real = Path(os.path.realpath(path))
        return real if any(inside(real, root) for root in self.roots) else None

    def _enqueue(self, directory: Path) -> None:
        if directory not in self.seen:
            self.seen.add(directory)
            self.pending.append(directory)

    # --- one kustomization -----------------------------------------------------------------------------------

    def _kustomization(self, directory: Path) -> None:
        path = next((directory / name for name in KUSTOMIZATION_FILES if (directory / name).is_file()), None)
        if path is None:
            return  # a directory without a kustomization: kustomize reports it
        name = self._name(path)
        try:
            kustomization = safe_yaml.read_file(path, opener=self.opener)
        except beneath.Outside:
            return  # the helper refuses it where kustomize reads it
        except (OSError, yaml.YAMLError) as error:
            self._add(name, "", "", f"cannot be checked: {_one_line(error)}")
            return
        if not isinstance(kustomization, dict):
            return  # not a kustomization: kustomize reports it
        self.result.kustomizations += 1
        binary = safe_yaml.binary_field(kustomization)
        if binary is not None:
            self._add(name, binary, "", "is a !!binary value, which kustomize would read as text; refused")
        for field_name in _HELM_FIELDS:
            if kustomization.get(field_name):
                self._add(name, field_name, "", "asks for helm, which the operator never runs")
        for field_name, reference in _base_references(kustomization):
            self._base(name, directory, field_name, reference)
        for field_name, reference in _file_references(kustomization):
            self._file(name, directory, field_name, reference)
        for field_name in _PLUGIN_FIELDS:
            for index, entry in enumerate(_list(kustomization.get(field_name))):
                if isinstance(entry, str):
                    self._plugin_entry(name, directory, f"{field_name}[{index}]", entry)

    def _remote(self, name: str, field_name: str, reference: str) -> bool:
        """True when ``reference`` is remote (then reported unless remote bases are allowed and it is fetched over
        http(s))."""
        if not is_remote(reference):
            return False
        if not self.allow_remote:
            self._add(name, field_name, reference, "is remote; remote bases and URLs are refused (an administrator "
                                                   "may allow them with the operator flag --no-remote-bases=false)")
        else:
            refusal = unfetchable_remote(reference)
            if refusal:
                self._add(name, field_name, reference, refusal)
        return True

    def _local(self, name: str, directory: Path, field_name: str, reference: str) -> Path | None:
        """Where a local path reference leads, symlinks resolved, when that is inside the roots (recorded either
        way); None for a remote one (reported unless allowed) or one outside (the helper refuses it)."""
        if self._remote(name, field_name, reference):
            return None
        target = os.path.normpath(os.path.join(directory, reference))  # kustomize's reading: cleaned, then opened
        self.result.references.append(Reference(name, field_name, reference, target))
        return self._within_roots(Path(target))

    def _base(self, name: str, directory: Path, field_name: str, reference: str) -> None:
        target = self._local(name, directory, field_name, reference)
        if target is None:
            return
        if target.is_dir():
            self._enqueue(target)
        elif target.is_file():
            self._check_file(name, directory, field_name, reference, target)

    def _file(self, name: str, directory: Path, field_name: str, reference: str) -> None:
        """A file reference. Strategic-merge patch entries are read as inline YAML first, with a fallback to a
        path, so text that parses as YAML objects is recorded only for where it could lead as a path."""
        target = self._local(name, directory, field_name, reference)
        if target is not None and target.exists() and _inline_documents(reference) is None:
            self._check_file(name, directory, field_name, reference, target)

    def _check_file(self, name: str, directory: Path, field_name: str, reference: str, target: Path) -> None:
        if not inside(target.parent, directory):
            self.result.files_outside_own_directory = True
        try:
            size = target.stat().st_size
        except OSError:
            return
        if size > MAX_FILE_BYTES:
            self._add(name, field_name, reference, f"is {size} bytes, over the {MAX_FILE_BYTES}-byte limit per file")

    def _plugin_entry(self, name: str, directory: Path, field_name: str, entry: str) -> None:
        """A generator/transformer/validator: inline YAML configurations, or a file holding them."""
        inline = _inline_documents(entry)
        if inline is not None:
            self._plugin_configs(name, directory, field_name, inline)
            self._local(name, directory, field_name, entry)  # kustomize's fallback reading, as a path
            return
        target = self._local(name, directory, field_name, entry)
        if target is None:
            return
        if target.is_dir():
            self._add(name, field_name, entry, "is a directory; plugin configurations built from a kustomization "
                                               "cannot be checked, list the configuration files instead")
            return
        if not target.is_file():
            return
        self._check_file(name, directory, field_name, entry, target)
        try:
            documents = safe_yaml.read_file(target, all_documents=True, opener=self.opener)
        except beneath.Outside:
            return  # the helper refuses it where kustomize reads it
        except (OSError, yaml.YAMLError) as error:
            self._add(name, field_name, entry, f"cannot be checked: {_one_line(error)}")
            return
        self._plugin_configs(name, directory, field_name, documents)

    def _plugin_configs(self, name: str, directory: Path, field_name: str, documents: list[Any]) -> None:
        """File references inside builtin plugin configurations; kustomize resolves them from the kustomization
        that lists the configuration."""
        for index, config in enumerate(d for d in documents if isinstance(d, dict)):
            prefix = f"{field_name}#{index}"
            kind = config.get("kind")
            if kind == "HelmChartInflationGenerator":
                self._add(name, prefix, "", "asks for helm, which the operator never runs")
            for sub_field, reference in _plugin_file_references(kind, config):
                self._file(name, directory, f"{prefix}.{sub_field}", reference)


# --- which fields hold references ------------------------------------------------------------------------------

def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _base_references(kustomization: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Entries that may be a file, a kustomization directory or a remote base."""
    for field_name in _BASE_FIELDS:
        for index, reference in enumerate(_list(kustomization.get(field_name))):
            if isinstance(reference, str) and reference:
                yield f"{field_name}[{index}]", reference


def _generator_sources(prefix: str, generator: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Files read by a configMapGenerator/secretGenerator entry (``files`` items are ``[key=]path``)."""
    for index, source in enumerate(_list(generator.get("files"))):
        if isinstance(source, str):
            yield f"{prefix}files[{index}]", source.split("=", 1)[1] if "=" in source else source
    for index, source in enumerate(_list(generator.get("envs"))):
        if isinstance(source, str):
            yield f"{prefix}envs[{index}]", source
    if isinstance(generator.get("env"), str):
        yield f"{prefix}env", generator["env"]


def _inline_documents(text: str) -> list[Any] | None:
    """``text`` parsed as inline YAML objects (how kustomize first reads strategic-merge patch entries and
    generator/transformer entries), or None when it is a path."""
    try:
        documents = safe_yaml.load_all(text)
    except yaml.YAMLError:
        return None
    return documents if any(isinstance(d, dict) for d in documents) else None


def _path_entries(prefix: str, entries: Any) -> Iterator[tuple[str, str]]:
    for index, entry in enumerate(_list(entries)):
        if isinstance(entry, str) and entry:
            yield f"{prefix}[{index}]", entry


def _field_paths(prefix: str, entries: Any, key: str = "path") -> Iterator[tuple[str, str]]:
    for index, entry in enumerate(_list(entries)):
        if isinstance(entry, dict) and isinstance(entry.get(key), str) and entry[key]:
            yield f"{prefix}[{index}].{key}", entry[key]


def _file_references(kustomization: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Entries that name a file kustomize loads (or fetches, when it is an http(s) URL)."""
    yield from _path_entries("crds", kustomization.get("crds"))
    yield from _path_entries("configurations", kustomization.get("configurations"))
    yield from _path_entries("patchesStrategicMerge", kustomization.get("patchesStrategicMerge"))
    yield from _field_paths("patchesJson6902", kustomization.get("patchesJson6902"))
    yield from _field_paths("patches", kustomization.get("patches"))
    yield from _field_paths("replacements", kustomization.get("replacements"))
    openapi = kustomization.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi.path", openapi["path"]
    for field_name in ("configMapGenerator", "secretGenerator"):
        for index, generator in enumerate(_list(kustomization.get(field_name))):
            if isinstance(generator, dict):
                yield from _generator_sources(f"{field_name}[{index}].", generator)


def _plugin_file_references(kind: Any, config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """File fields of kustomize's builtin plugins (``api/internal/builtins``), by kind."""
    if kind in ("ConfigMapGenerator", "SecretGenerator"):
        yield from _generator_sources("", config)
    elif kind in ("PatchTransformer", "PatchJson6902Transformer"):
        if isinstance(config.get("path"), str) and config["path"]:
            yield "path", config["path"]
    elif kind == "PatchStrategicMergeTransformer":
        yield from _path_entries("paths", config.get("paths"))
    elif kind == "ReplacementTransformer":
        yield from _field_paths("replacements", config.get("replacements"))


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
