"""Lint of the image's Dockerfile (no Docker engine or hadolint on these machines).

Each rule is a function from parsed instructions to a list of problems, checked
against the real Dockerfile and against a small counter-example, so a rule that
silently stopped matching would fail too.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):  # comments inside a continued instruction
            continue
        start = start if pending else number
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        instructions.append(Instruction(start, keyword.upper(), args.strip()))
        pending = ""
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Instructions grouped per build stage (each starting with its FROM)."""
    grouped: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            grouped.append([])
        if grouped:
            grouped[-1].append(instruction)
    return grouped


def _stage_name(from_args: str) -> str | None:
    words = from_args.split()
    return words[2] if len(words) >= 3 and words[1].upper() == "AS" else None


def _from_image(from_args: str) -> str:
    return next(word for word in from_args.split() if not word.startswith("--"))


def pinned_base_images(instructions: list[Instruction]) -> list[str]:
    """Every FROM names a tag or digest other than ``latest`` (or an earlier stage, or scratch)."""
    problems, earlier = [], set()
    for instruction in (i for i in instructions if i.keyword == "FROM"):
        image = _from_image(instruction.args)
        if image != "scratch" and image not in earlier:
            tag = image.rpartition("/")[2].partition(":")[2]
            if "@sha256:" not in image and tag in ("", "latest"):
                problems.append(f"line {instruction.line}: base image {image} is not pinned to a tag")
        earlier.add(_stage_name(instruction.args))
    return problems


def non_root_user(instructions: list[Instruction]) -> list[str]:
    """The final stage switches to a user other than root."""
    users = [i.args.partition(":")[0] for i in stages(instructions)[-1] if i.keyword == "USER"]
    if not users:
        return ["the final stage has no USER"]
    return [f"the final stage runs as {users[-1]}"] if users[-1] in ("root", "0") else []


def no_remote_add(instructions: list[Instruction]) -> list[str]:
    """ADD never fetches URLs (unverified downloads); COPY or a checked RUN instead."""
    return [f"line {i.line}: ADD of a URL" for i in instructions
            if i.keyword == "ADD" and re.search(r"\b(https?|git)://|git@", i.args)]


def lean_apt_installs(instructions: list[Instruction]) -> list[str]:
    """apt-get install runs with -y and --no-install-recommends, and the same RUN removes the lists."""
    problems = []
    for instruction in (i for i in instructions if i.keyword == "RUN" and "apt-get install" in i.args):
        words = shlex.split(instruction.args.replace("&&", " "))
        if "-y" not in words and "--yes" not in words:
            problems.append(f"line {instruction.line}: apt-get install without -y")
        if "--no-install-recommends" not in words:
            problems.append(f"line {instruction.line}: apt-get install without --no-install-recommends")
        if "/var/lib/apt/lists/*" not in instruction.args:
            problems.append(f"line {instruction.line}: apt lists not removed in the same RUN")
    return problems


def copy_from_known_stages(instructions: list[Instruction]) -> list[str]:
    """COPY --from names a stage defined earlier in the file."""
    problems, earlier = [], set()
    for instruction in instructions:
        if instruction.keyword == "FROM":
            earlier.add(_stage_name(instruction.args))
        match = re.search(r"--from=(\S+)", instruction.args) if instruction.keyword == "COPY" else None
        if match and match.group(1) not in earlier:
            problems.append(f"line {instruction.line}: COPY --from={match.group(1)} is not an earlier stage")
    return problems


def exec_form_entrypoint(instructions: list[Instruction]) -> list[str]:
    """ENTRYPOINT is a JSON array, so the operator is PID 1 and receives SIGTERM."""
    entrypoints = [i for i in stages(instructions)[-1] if i.keyword == "ENTRYPOINT"]
    if not entrypoints:
        return ["the final stage has no ENTRYPOINT"]
    try:
        form = json.loads(entrypoints[-1].args)
    except json.JSONDecodeError:
        form = None
    ok = isinstance(form, list) and all(isinstance(word, str) for word in form)
    return [] if ok else [f"line {entrypoints[-1].line}: ENTRYPOINT is in shell form"]


RULES = [pinned_base_images, non_root_user, no_remote_add, lean_apt_installs, copy_from_known_stages,
         exec_form_entrypoint]

BAD_EXAMPLES = {
    pinned_base_images: "FROM python\nFROM debian:latest\n",
    non_root_user: "FROM python:3.11-slim\nUSER 0\n",
    no_remote_add: "FROM python:3.11-slim\nADD https://example.org/x.tgz /x\n",
    lean_apt_installs: "FROM python:3.11-slim\nRUN apt-get update && \\\n    apt-get install git\n",
    copy_from_known_stages: "FROM python:3.11-slim\nCOPY --from=builder /a /a\n",
    exec_form_entrypoint: "FROM python:3.11-slim\nENTRYPOINT kfdef-operator run\n",
}


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_dockerfile_follows_rule(rule) -> None:
    assert rule(parse(DOCKERFILE.read_text())) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_rule_catches_its_counter_example(rule) -> None:
    assert rule(parse(BAD_EXAMPLES[rule])), f"{rule.__name__} accepted a Dockerfile it must reject"


def test_parser_joins_continuations_and_skips_comments() -> None:
    text = "# c\nFROM a:1 AS b\nRUN one \\\n  # inside\n  two\n"
    assert parse(text) == [Instruction(2, "FROM", "a:1 AS b"), Instruction(3, "RUN", "one two")]


def test_final_image_runs_the_operator_with_the_cache_dir() -> None:
    final = stages(parse(DOCKERFILE.read_text()))[-1]
    assert json.loads(next(i.args for i in final if i.keyword == "ENTRYPOINT")) == ["kfdef-operator", "run"]
    env = " ".join(i.args for i in final if i.keyword == "ENV")
    assert "XDG_CACHE_HOME=/cache" in env
    # the render helper built in the first stage, named explicitly (the operator never takes kustomize from PATH)
    assert "KFDEF_RENDER_HELPER=/usr/local/bin/kfdef-render" in env
    assert any(i.keyword == "COPY" and i.args.endswith("/usr/local/bin/kfdef-render") for i in final)
    assert any(i.keyword == "EXPOSE" and i.args == "8080" for i in final)


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` keeps ``path`` out of the build context (the last matching pattern wins)."""
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        stem = pattern.lstrip("!").rstrip("/")
        if stem == "*" or path == stem or path.startswith(stem + "/"):
            ignored = not negated
    return ignored


def test_every_copy_from_the_build_context_is_in_the_context() -> None:
    patterns = [line.strip() for line in (DOCKERFILE.parent / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    copies = [i for i in parse(DOCKERFILE.read_text()) if i.keyword == "COPY" and "--from=" not in i.args]
    sources = [source.rstrip("/") for i in copies for source in i.args.split()[:-1]]
    assert "kfdefs/demo/manifests" in sources
    assert [s for s in sources if _ignored(s, patterns)] == []
    assert _ignored("tests", patterns) and _ignored("kfdefs/kubeflow-v1.2.0-stacks.yaml", patterns)


def test_the_image_serves_the_in_cluster_sample_from_a_local_source_root() -> None:
    final = stages(parse(DOCKERFILE.read_text()))[-1]
    (destination,) = [i.args.split()[1] for i in final if i.keyword == "COPY" and i.args.startswith("kfdefs/demo/")]
    env = dict(word.split("=", 1) for i in final if i.keyword == "ENV" for word in i.args.split())
    sample = (DOCKERFILE.parent / "kfdefs" / "demo" / "in-cluster.yaml").read_text()
    assert f"uri: file://{destination}\n" in sample
    assert destination.startswith(env["KFDEF_LOCAL_SOURCE_ROOTS"] + "/")
    # deploy/ passes operator.env as envFrom, which wins over the image's ENV even when empty.
    env_file = DOCKERFILE.parent / "deploy" / "common" / "operator.env"
    operator_env = dict(line.split("=", 1) for line in env_file.read_text().splitlines()
                        if line and not line.startswith("#"))
    assert env["KFDEF_LOCAL_SOURCE_ROOTS"] in operator_env["KFDEF_LOCAL_SOURCE_ROOTS"].split(":")
