"""Where ``build -o`` writes, decided and checked before anything is rendered.

``-o -`` (default) writes one YAML stream to stdout. A path that exists and is not a directory (a file,
``/dev/null``), or a new path ending in ``.yaml``/``.yml``, gets that one stream. Any other path is a
directory holding one ``NN-<application>.yaml`` per application in apply order; it is created when
missing. An existing directory is only written to when it holds nothing but such files (an earlier
build's): those are replaced, and the ones this build does not write again are removed, so the directory
holds exactly this build. A directory holding anything else is refused, so that ``-o ~`` cannot delete a
file build did not write.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from kfdef_operator.build.render import RenderedApplication
from kfdef_operator.build.safe_yaml import SafeDumper
from kfdef_operator.cli.errors import BadInput, Failed

#: The files build writes into a directory: ``NN-<application>.yaml`` (application names are DNS labels).
OWN_FILE = re.compile(r"^[0-9]+-[a-z0-9]([-a-z0-9]*[a-z0-9])?\.yaml$")


@dataclass(frozen=True)
class Output:
    """A checked output target: stdout (``path`` None), one file, or a directory."""

    path: Path | None
    directory: bool = False

    def describe(self) -> str:
        return "stdout" if self.path is None else str(self.path)


def output_target(spec: str, kfdef_file: str) -> Output:
    """The target ``-o SPEC`` names, after checking that it can be written and is not the KfDef file read;
    :class:`BadInput` if not."""
    if spec == "-":
        return Output(None)
    path = Path(spec).expanduser()
    if path.exists() and not path.is_dir():
        if kfdef_file != "-" and path.samefile(kfdef_file):
            raise BadInput(f"-o {spec} is the KfDef file itself; name another file or a directory")
        _check_writable(path, path)
        return Output(path)
    if not path.exists() and path.suffix in (".yaml", ".yml"):
        _check_writable(path, _existing_parent(path))
        return Output(path)
    if path.is_dir():
        foreign = sorted(entry.name for entry in path.iterdir()
                         if not (OWN_FILE.fullmatch(entry.name) and entry.is_file()))
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise BadInput(f"-o {spec}: refusing to write into a directory holding files build did not write "
                           f"({shown}); name a new or empty directory, or one an earlier build wrote")
        _check_writable(path, path)
    else:
        _check_writable(path, _existing_parent(path))
    return Output(path, directory=True)


def _existing_parent(path: Path) -> Path:
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise BadInput(f"-o {path}: {parent} is not a directory")
    return parent


def _check_writable(path: Path, checked: Path) -> None:
    if not os.access(checked, os.W_OK):
        raise BadInput(f"-o {path}: {checked} is not writable")


def write(target: Output, rendered: list[RenderedApplication]) -> None:
    """Write the applications' objects to the target; :class:`Failed` when the system refuses."""
    try:
        if target.path is None:
            write_stream(sys.stdout, [obj for app in rendered for obj in app.objects])
        elif target.directory:
            _write_directory(target.path, rendered)
        else:
            with open(target.path, "w") as out:
                write_stream(out, [obj for app in rendered for obj in app.objects])
    except OSError as error:
        where = error.filename or target.describe()
        raise Failed(f"cannot write {where}: {error.strerror or error}") from None


def write_stream(out: TextIO, objects: list[dict[str, Any]]) -> None:
    yaml.dump_all(objects, out, Dumper=SafeDumper, sort_keys=False, default_flow_style=False, explicit_start=True)


def _write_directory(directory: Path, rendered: list[RenderedApplication]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    width = len(str(len(rendered)))
    written = set()
    for index, app in enumerate(rendered, 1):
        name = f"{index:0{width}d}-{app.name}.yaml"
        with open(directory / name, "w") as out:
            write_stream(out, app.objects)
        written.add(name)
    for stale in directory.iterdir():
        if stale.name not in written and OWN_FILE.fullmatch(stale.name):
            stale.unlink()
