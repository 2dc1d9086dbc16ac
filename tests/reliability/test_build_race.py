"""A tree that changes while it is read (issue 39, item 3): a directory of the tree swapped for a symlink out of it,
and back, as fast as the machine allows, while builds read the file below it. A check of the path followed by an
open by name reads the outside file now and then; opened beneath the tree's descriptor (``openat2``), never. The
render helper runs without Landlock here, which would otherwise stop the read as a second layer; the operator's own
copy of a local tree is tried the same way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.build.kustomize import find_render_helper
from kfdef_operator.build.render import RenderError, render
from kfdef_operator.source.resolve import ResolvedSource

pytestmark = pytest.mark.kustomize

SECRET = "operator-secret-5c1e"
DEEP = "/".join(f"level{i}" for i in range(40))  # each read resolves 40 directories after the swapped one

# Exchanges two paths (renameat2 RENAME_EXCHANGE, so each is always there), holds the swapped state a little, waits,
# and again, until SIGINT; then prints how many swaps it made.
SWAPPER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b, hold, wait = sys.argv[1].encode(), sys.argv[2].encode(), int(sys.argv[3]), int(sys.argv[4])
swaps = 0
try:
    while True:
        for _ in (0, 1):
            if libc.renameat2(-100, a, -100, b, 2) != 0:
                sys.exit(f"renameat2: errno {ctypes.get_errno()}")
            for _ in range(hold):
                pass
        swaps += 1
        for _ in range(wait):
            pass
except KeyboardInterrupt:
    print(swaps)
"""


@contextmanager
def swapping(directory: Path, link: Path, *, hold: int, wait: int) -> Iterator[list[int]]:
    """``directory`` and the symlink ``link`` exchanged back and forth while the block runs; the list it yields
    gets the number of swaps."""
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(directory), str(link), str(hold), str(wait)],
                               stdout=subprocess.PIPE, text=True)
    swaps: list[int] = []
    try:
        yield swaps
    finally:
        swapper.send_signal(signal.SIGINT)
        out, _ = swapper.communicate(timeout=30)
        assert swapper.returncode == 0, f"the swapper failed: {out}"
        swaps.append(int(out))


def deep_file(root: Path, text: str) -> None:
    (root / DEEP).mkdir(parents=True)
    (root / DEEP / "data.txt").write_text(text)


def tally(attempt: Callable[[], str], times: int) -> Counter[str]:
    """The outcomes of ``attempt`` run ``times`` times, for at most a minute."""
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + 60
    while sum(outcomes.values()) < times and time.monotonic() < deadline:
        outcomes[attempt()] += 1
    return outcomes


def test_a_directory_swapped_for_a_symlink_out_during_builds_is_never_read(tmp_path, reliability):
    """The render helper without Landlock, 300 builds of 50 reads each while a directory of the tree flips to a
    symlink out of it. Before files were opened beneath their root: 18 of 300 builds leaked, 250 were refused."""
    root, outside = tmp_path / "repo", tmp_path / "outside"
    deep_file(root / "d", "harmless")
    deep_file(outside / "d", SECRET)
    (tmp_path / "link").symlink_to(outside / "d")
    files = "".join(f"  - k{i}=d/{DEEP}/data.txt\n" for i in range(50))
    (root / "kustomization.yaml").write_text(f"configMapGenerator:\n- name: c\n  files:\n{files}")
    argv = [str(find_render_helper().path), "build", "--no-landlock", "--load-restrictor=LoadRestrictionsNone",
            f"--root={root}", str(root)]

    def build() -> str:
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        if SECRET.encode() in done.stdout:
            return "leaked"
        return "refused" if b"is outside the tree the KfDef names" in done.stderr else f"exit {done.returncode}"

    with swapping(root / "d", tmp_path / "link", hold=3000, wait=100_000) as swaps:
        outcomes = tally(build, 300)
    assert outcomes["leaked"] == 0, f"builds put the file outside the tree into a ConfigMap: {outcomes}"
    assert outcomes["exit 0"] and outcomes["refused"], f"the race did not happen: {outcomes}, {swaps} swaps"
    reliability.figure("builds", sum(outcomes.values()))
    reliability.figure("leaked", outcomes["leaked"])
    reliability.figure("refused (the swap seen)", outcomes["refused"])


def test_a_local_tree_changing_while_the_operator_copies_it_lends_it_no_outside_file(tmp_path, reliability):
    """Legacy mode copies the package (a local source is used in place); a directory of it flips to a symlink out of
    the tree during the copies: the render fails or builds the tree's own file, never the outside one. Before the
    copy opened each entry from its parent's descriptor: 15 of 60 renders leaked."""
    package = tmp_path / "repo" / "pkg"
    deep_file(package / "base" / "d", "harmless")
    deep_file(tmp_path / "outside" / "d", SECRET)
    (tmp_path / "repo" / "link").symlink_to(tmp_path / "outside" / "d")  # outside the package: never copied
    (package / "base" / "kustomization.yaml").write_text(
        f"configMapGenerator:\n- name: c\n  files: [k=d/{DEEP}/data.txt]\n")
    kfdef = parse_kfdef({"metadata": {"name": "kf", "namespace": "tenant"}, "spec": {
        "repos": [{"name": "manifests", "uri": "/unused"}],
        "applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "pkg"}}}]}})
    sources = {"manifests": ResolvedSource("manifests", str(tmp_path / "repo"), tmp_path / "repo", "r1")}

    def render_once() -> str:
        try:
            rendered = render(kfdef, sources, tmp_path / "work")
        except RenderError:
            return "failed"
        return "leaked" if SECRET in json.dumps(rendered[0].objects) else "built"

    with swapping(package / "base" / "d", tmp_path / "repo" / "link", hold=3000, wait=3000) as swaps:
        outcomes = tally(render_once, 60)
    assert outcomes["leaked"] == 0, f"renders put the file outside the tree into a ConfigMap: {outcomes}"
    assert outcomes["built"] and outcomes["failed"], f"the race did not happen: {outcomes}, {swaps} swaps"
    reliability.figure("renders", sum(outcomes.values()))
    reliability.figure("leaked", outcomes["leaked"])
