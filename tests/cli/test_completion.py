"""`jobgate completion SHELL`: the script bash runs completes subcommands, options,
choices and paths (directories only where a directory is asked for); zsh's and fish's
are read by the shell where it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from jobgate.cli import main


def script(capsys, shell: str) -> str:
    capsys.readouterr()
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def completions(script_path, cwd, *words: str) -> list[str]:
    """What bash offers for the last of `words` (the word being completed)."""
    if shutil.which("bash") is None:
        pytest.skip("bash is missing")
    quoted = " ".join(f"'{w}'" for w in ("jobgate", *words))
    program = f'source {script_path}; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _shtab_jobgate; printf "%s\\n" "${{COMPREPLY[@]}}"'
    done = subprocess.run(["bash", "-c", program], cwd=cwd, capture_output=True, text=True, timeout=30, check=True)
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_options_choices_and_paths(tmp_path, capsys):
    path = tmp_path / "jobgate.bash"
    path.write_text(script(capsys, "bash"))
    (tmp_path / "dirA").mkdir()
    (tmp_path / "dfile").write_text("")
    assert completions(path, tmp_path, "") == ["check", "stage", "serve", "submit", "revalidate", "jobs", "token", "bench", "demo", "completion"]
    assert completions(path, tmp_path, "re") == ["revalidate"]
    assert completions(path, tmp_path, "jobs", "") == ["list", "show", "audit", "mark"]
    assert set(completions(path, tmp_path, "check", "--f")) == {"--format", "--fail-on"}
    assert completions(path, tmp_path, "check", "--format", "") == ["text", "json", "junit", "sarif", "github"]
    assert completions(path, tmp_path, "stage", "--job-dir", "d") == ["dirA"]  # a directory is asked for
    assert sorted(completions(path, tmp_path, "check", "--config", "d")) == ["dfile", "dirA"]
    assert "--server" not in completions(path, tmp_path, "jobs", "audit", "--")  # audit reads the store only


@pytest.mark.parametrize(("shell", "header", "check"), [("zsh", "#compdef jobgate", ["zsh", "-n"]), ("fish", "complete -c jobgate", ["fish", "--no-execute"])])
def test_zsh_and_fish_scripts_are_read_by_their_shell(tmp_path, capsys, shell, header, check):
    text = script(capsys, shell)
    assert header in text and "revalidate" in text and "--job-dir" in text
    if shutil.which(shell) is None:
        missing = f"{shell} is not installed: its script is not parsed (scripts/dev test installs it from Debian's packages)"
        if os.environ.get("CI"):
            raise RuntimeError(missing)
        pytest.skip(missing)
    path = tmp_path / f"jobgate.{shell}"
    path.write_text(text)
    done = subprocess.run([*check, str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
