"""Every command's --help ends with an example (issue 90), and the examples' flags are the command's own."""

from __future__ import annotations

import shlex

import typer

from fedaudit.cli.app import app


def _leaves(group, path: tuple[str, ...] = ()):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):  # a group (Typer may carry its own Click)
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def test_every_command_has_an_example_whose_flags_it_takes():
    root = typer.main.get_command(app)
    leaves = list(_leaves(root))
    assert len(leaves) > 40  # every method of every family
    for path, cmd in leaves:
        assert cmd.epilog and cmd.epilog.startswith("Example: "), path
        example = cmd.epilog.removeprefix("Example: ")
        line = [part for part in example.split("; ") if part.startswith("fedaudit " + " ".join(path))]
        assert line, (path, example)  # the example runs this command
        words = shlex.split(line[-1])[1 + len(path):]
        flags = {f for p in cmd.params for f in (*p.opts, *p.secondary_opts)}
        for w in words:
            if w.startswith("-") and not w.lstrip("-").replace(".", "").isdigit():
                assert w in flags, (path, w)
