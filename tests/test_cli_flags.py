"""Flag conventions across every command (issue #20 item 10): one name, one meaning."""

from __future__ import annotations

import typer

from fedaudit.cli.app import app


def _commands():
    root = typer.main.get_command(app)
    stack = [([], root)]
    while stack:
        path, cmd = stack.pop()
        subs = getattr(cmd, "commands", None)
        if subs:
            stack += [([*path, name], sub) for name, sub in subs.items()]
        else:
            yield " ".join(path), [p for p in cmd.params if type(p).__name__.endswith("Option")]


COMMANDS = list(_commands())


def _named(opt_name):
    return [(cmd, p) for cmd, params in COMMANDS for p in params if opt_name in p.opts]


def test_every_option_has_help():
    missing = [f"{cmd} {p.opts[0]}" for cmd, params in COMMANDS for p in params if not (p.help or "").strip()]
    assert not missing, missing


def test_truth_is_always_an_input():
    """--truth reads the ground truth everywhere; capture writes it with --truth-out."""
    found = _named("--truth")
    assert len(found) > 10
    for cmd, p in found:
        assert cmd != "capture", "capture writes the truth: --truth-out"
        assert "write" not in p.help.lower(), (cmd, p.help)
    assert any("--truth-out" in p.opts for cmd, params in COMMANDS if cmd == "capture" for p in params)


def test_labels_always_names_a_label_method():
    for cmd, p in _named("--labels"):
        assert "label method" in p.help.lower(), (cmd, p.help)


def test_output_is_a_file_or_folder_with_a_short_flag_and_force():
    """-o/--output writes a file, -o/--out a folder; a command that writes refuses to replace without --force
    (audit-round resumes its folder instead)."""
    for cmd, params in COMMANDS:
        names = {o for p in params for o in p.opts}
        for long in ("--output", "--out"):
            for p in params:
                if long in p.opts:
                    assert "-o" in p.opts, (cmd, long, "has no -o")
        if "-o" in names and cmd != "audit-round":
            assert "--force" in names, (cmd, "writes -o but has no --force")


def test_true_by_default_flags_can_be_turned_off():
    for cmd, params in COMMANDS:
        for p in params:
            if p.is_flag and p.default is True:
                assert p.secondary_opts, (cmd, p.opts, "defaults on but has no --no- form")
