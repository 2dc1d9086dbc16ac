"""Files opened and copied beneath their tree: what the kernel lets through (symlinks staying inside, absolute ones
and ones into another root included) and what it refuses (``..`` and symlinks leaving the tree), and a copy that keeps
symlinks as they are and refuses what is not a file, a directory or a symlink. The race itself is
tests/reliability/test_build_race.py."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from kfdef_operator.build import beneath


@pytest.fixture
def tree(tmp_path) -> Path:
    """``tmp/root`` (in.txt, sub/x.txt, up -> sub, abs -> <root>/sub/x.txt, out -> ../outside, cross ->
    ../other/o.txt) next to ``tmp/outside`` (secret.txt) and ``tmp/other`` (o.txt)."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "in.txt").write_text("in")
    (root / "sub" / "x.txt").write_text("x")
    for name, text in (("outside", "secret"), ("other", "o")):
        (tmp_path / name).mkdir()
        (tmp_path / name / ("secret.txt" if name == "outside" else "o.txt")).write_text(text)
    (root / "up").symlink_to("sub")
    (root / "abs").symlink_to(root / "sub" / "x.txt")
    (root / "out").symlink_to("../outside")
    (root / "cross").symlink_to("../other/o.txt")
    return root


def read(roots: list[Path], path: Path) -> str:
    with open(path, opener=beneath.opener(roots)) as stream:
        return stream.read()


def test_the_kernel_enforces_the_rule_here():
    assert beneath.kernel_enforced(), "this kernel has openat2 (Linux 5.6): the tests would not cover it"


def test_symlinks_staying_inside_the_roots_are_followed(tree, tmp_path):
    roots = [tree, tmp_path / "other"]
    assert [read(roots, tree / name) for name in ("in.txt", "up/x.txt", "abs", "cross", "sub/../in.txt")] == [
        "in", "x", "x", "o", "in"]
    (tmp_path / "alias").symlink_to(tree)  # a path below no root that resolves into one
    assert read(roots, tmp_path / "alias" / "in.txt") == "in"


@pytest.mark.parametrize("path", ["out/secret.txt", "../outside/secret.txt", "cross", "up/../out/secret.txt"])
def test_paths_leaving_the_roots_are_refused(tree, path):
    with pytest.raises(beneath.Outside) as refused:
        read([tree], tree / path)
    assert refused.value.errno == errno.EXDEV


def test_other_failures_keep_their_cause(tree):
    with pytest.raises(FileNotFoundError):
        read([tree], tree / "missing.txt")
    with pytest.raises(IsADirectoryError):
        read([tree], tree / "sub")


def test_a_copy_keeps_symlinks_and_permissions_and_lists_every_directory(tree, tmp_path):
    (tree / "sub" / "x.txt").chmod(0o751)
    listed: list[list[str]] = []
    beneath.copy_tree(tree, tmp_path / "copies" / "copy", listed.append)
    copy = tmp_path / "copies" / "copy"
    assert os.readlink(copy / "out") == "../outside" and os.readlink(copy / "abs") == str(tree / "sub" / "x.txt")
    assert (copy / "sub" / "x.txt").read_text() == "x" and not (copy / "sub" / "x.txt").is_symlink()
    assert stat.S_IMODE((copy / "sub" / "x.txt").stat().st_mode) == 0o751
    assert sorted(map(sorted, listed)) == [["abs", "cross", "in.txt", "out", "sub", "up"], ["x.txt"]]


def test_a_copy_refuses_what_is_not_a_file_a_directory_or_a_symlink(tree, tmp_path):
    os.mkfifo(tree / "sub" / "pipe")  # would block a copy that opened it for reading
    with pytest.raises(OSError, match="not a regular file") as refused:
        beneath.copy_tree(tree, tmp_path / "copy", lambda names: None)
    assert refused.value.filename == str(tree / "sub" / "pipe")
