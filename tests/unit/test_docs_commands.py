"""Every ``nvdeploy`` command line the README and docs/ show names a real command and real options of it.

Commands are taken from code blocks (``\\``-continued lines joined, ``;``/``&&``/pipes split, ``[--opt]`` read as
the option) and from inline code (`` `nvdeploy ...` ``), then resolved on the real click group: each subcommand
must exist and each ``-x``/``--long`` word must be an option of the command it follows (or of ``nvdeploy`` itself).
Placeholders (``RUN_DIR``, ``inventories/mycluster.yaml``) are arguments and are not opened. The two set-up
commands of the README are run by tests/integration (the demo) and by CI (tests/run.sh).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from nvdeploy.cli.app import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_SEPARATORS = re.compile(r"\s(?:\|\||\||&&|;|>>?|2>&1|2>)\s|;\s|;$")
_OPTIONAL = re.compile(r"\[(--?[\w-]+(?:[ =][^\]]+)?)\]")


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command text) of every nvdeploy command shown in ``path``."""
    out: list[tuple[int, str]] = []
    in_block, pending, start = False, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            text = line.strip().removeprefix("$ ")
            if pending:
                text, pending = pending + " " + text, ""
            if text.endswith("\\"):
                pending, start = text[:-1], start or number
                continue
            for piece in _SEPARATORS.split(text.split(" # ")[0]):
                if piece.strip().startswith("nvdeploy "):
                    out.append((start or number, piece.strip()))
            start = 0
        else:
            out += [(number, m.group(1)) for m in re.finditer(r"`(nvdeploy [^`]+)`", line)]
    return out


def _shown() -> list[tuple[str, str]]:
    return [(f"{path.relative_to(ROOT)}:{number}", text) for path in DOCS for number, text in _lines(path)]


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("-")}


def problems(text: str) -> list[str]:
    """What in one command line the CLI does not know ([] when all of it is known)."""
    text = _OPTIONAL.sub(r"\1", text)
    try:
        words = shlex.split(text)[1:]
    except ValueError as exc:
        return [f"not a shell command line ({exc})"]
    command: click.Command = cli
    known = _options(cli)
    found: list[str] = []
    ctx = click.Context(cli, info_name="nvdeploy")
    for word in words:
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if name not in known | _options(command) | {"--help"}:
                found.append(f"{name} is not an option of {ctx.command_path}")
            continue
        if isinstance(command, click.Group):
            choices = word.split("|")  # "actions list|show": each must exist
            subs = [command.get_command(ctx, choice) for choice in choices]
            if any(sub is None for sub in subs) or "..." in word or "<" in word:
                if re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
                    found.append(f"{word!r} is not a command of {ctx.command_path}")
                break
            command = subs[0]  # type: ignore[assignment]
            ctx = click.Context(command, info_name=choices[0], parent=ctx)
    return found


def test_the_docs_show_many_commands() -> None:
    # A change to how commands are found must not make the test below pass by finding none.
    shown = _shown()
    assert len(shown) >= 60
    assert any(where.startswith("README.md") for where, _ in shown)


@pytest.mark.parametrize(("where", "text"), _shown(), ids=lambda value: str(value)[:60])
def test_every_shown_command_and_option_exists(where: str, text: str) -> None:
    assert problems(text) == [], f"{where}: {text}"


def test_the_checker_finds_an_unknown_command_and_an_unknown_option() -> None:
    unknown = problems("nvdeploy validate -i demo --no-such-flag")
    assert unknown == ["--no-such-flag is not an option of nvdeploy validate"]
    assert problems("nvdeploy frobnicate -i demo") == ["'frobnicate' is not a command of nvdeploy"]
    assert problems("nvdeploy slurm recover RUN_DIR") == []
    assert problems("nvdeploy actions list|show") == []
    assert problems("nvdeploy install -i inv.yaml [--allow-reboot]") == []
