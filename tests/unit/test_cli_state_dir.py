"""The state folder (runs and history) does not depend on where a command runs: --state-dir, then
NVDEPLOY_STATE_DIR, then ./reports where it exists (a checkout), then $XDG_STATE_HOME/nvdeploy (~/.local/state)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.runner.statedir import StateDirError, resolve_state_dir

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "inventories" / "demo.yaml")


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A home, an XDG state home and two working folders without reports/; nothing of the real home is used."""
    home, xdg, here, elsewhere = (tmp_path / name for name in ("home", "xdg", "here", "elsewhere"))
    for folder in (home, xdg, here, elsewhere):
        folder.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg))
    monkeypatch.delenv("NVDEPLOY_STATE_DIR", raising=False)
    monkeypatch.chdir(here)
    return {"home": home, "xdg": xdg, "here": here, "elsewhere": elsewhere}


def _run_dirs(base: Path) -> list[Path]:
    return sorted(p for p in (base / "demo").iterdir() if p.is_dir()) if (base / "demo").is_dir() else []


def test_the_rule_in_order(tmp_path):
    home, checkout, bare = tmp_path / "home", tmp_path / "checkout", tmp_path / "bare"
    (checkout / "reports").mkdir(parents=True)
    bare.mkdir()
    env = {"HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "xdg"), "NVDEPLOY_STATE_DIR": str(tmp_path / "env")}
    assert resolve_state_dir(Path("/opt/x"), env, checkout).path == Path("/opt/x")
    chosen = resolve_state_dir(None, env, checkout)
    assert (chosen.path, chosen.source) == (tmp_path / "env", "$NVDEPLOY_STATE_DIR")
    del env["NVDEPLOY_STATE_DIR"]
    assert resolve_state_dir(None, env, checkout).path == checkout / "reports"
    assert resolve_state_dir(None, env, bare).path == tmp_path / "xdg" / "nvdeploy"
    # The XDG specification: a relative XDG_STATE_HOME is ignored, and the default is ~/.local/state.
    for xdg in ("", "relative/state"):
        env["XDG_STATE_HOME"] = xdg
        assert resolve_state_dir(None, env, bare).path == home / ".local" / "state" / "nvdeploy"
    assert resolve_state_dir(None, {"HOME": str(home), "NVDEPLOY_STATE_DIR": "~/runs"}, bare).path \
        == Path("~/runs").expanduser()


def test_no_home_and_no_choice_is_a_clear_error(tmp_path, monkeypatch):
    def no_home(cls):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", classmethod(no_home))
    with pytest.raises(StateDirError, match="--state-dir"):
        resolve_state_dir(None, {}, tmp_path)


def test_a_run_outside_a_checkout_goes_to_the_xdg_state_folder_and_history_finds_it_from_anywhere(places,
                                                                                                  monkeypatch):
    result = invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q")
    assert result.exit_code == 0, result.output
    state = places["xdg"] / "nvdeploy"
    [run_dir] = _run_dirs(state)
    assert f"report: {run_dir / 'report.html'}" in result.output
    assert not (places["here"] / "reports").exists()
    # The case: history asked from another folder said "no history database".
    monkeypatch.chdir(places["elsewhere"])
    listing = invoke("history")
    assert listing.exit_code == 0, listing.output
    assert run_dir.name in listing.output and str(run_dir.resolve()) in listing.output
    # And diff finds the run by its id from there too.
    same = invoke("diff", run_dir.name, run_dir.name)
    assert same.exit_code == 0, same.output


def test_without_xdg_state_home_the_default_is_under_home(places, monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME")
    assert invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q").exit_code == 0
    assert len(_run_dirs(places["home"] / ".local" / "state" / "nvdeploy")) == 1


def test_reports_in_the_current_folder_beats_xdg(places):
    (places["here"] / "reports").mkdir()
    result = invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q")
    assert result.exit_code == 0, result.output
    assert len(_run_dirs(places["here"] / "reports")) == 1
    assert not (places["xdg"] / "nvdeploy").exists()
    assert "report: reports/demo/" in result.output


def test_the_environment_beats_reports_and_the_option_beats_the_environment(places, monkeypatch):
    (places["here"] / "reports").mkdir()
    env_dir, option_dir = places["elsewhere"] / "env-state", places["elsewhere"] / "option-state"
    monkeypatch.setenv("NVDEPLOY_STATE_DIR", str(env_dir))
    assert invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q").exit_code == 0
    assert len(_run_dirs(env_dir)) == 1 and not _run_dirs(places["here"] / "reports")
    assert (env_dir / "history.sqlite").is_file()
    assert invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q", "--state-dir", str(option_dir)).exit_code == 0
    assert len(_run_dirs(option_dir)) == 1 and len(_run_dirs(env_dir)) == 1
    # --out, the option's earlier name, is the same option.
    assert invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q", "--out", str(option_dir)).exit_code == 0
    assert len(_run_dirs(option_dir)) == 2
    listing = invoke("history", "--state-dir", str(option_dir))
    assert listing.exit_code == 0, listing.output
    assert len([row for row in listing.output.splitlines()[1:] if str(option_dir) in row]) == 2, listing.output


def test_history_without_a_database_names_the_folder_and_the_rule(places):
    result = invoke("history")
    assert result.exit_code == 2
    assert str(places["xdg"] / "nvdeploy" / "history.sqlite") in result.output
    assert "(from $XDG_STATE_HOME)" in result.output and "--state-dir" in result.output
    assert "NVDEPLOY_STATE_DIR" in result.output


def test_history_rebuild_reads_the_state_folder(places, monkeypatch):
    assert invoke("validate", "-i", DEMO, "--limit", "gpu001", "-q", "--no-history").exit_code == 0
    state = places["xdg"] / "nvdeploy"
    assert not (state / "history.sqlite").exists()
    monkeypatch.chdir(places["elsewhere"])
    rebuilt = invoke("history", "rebuild")
    assert rebuilt.exit_code == 0 and "1 run(s) recorded" in rebuilt.output, rebuilt.output
    assert (state / "history.sqlite").is_file()


def test_install_dry_run_writes_its_run_to_the_state_folder(places, monkeypatch):
    env_dir = places["elsewhere"] / "state"
    monkeypatch.setenv("NVDEPLOY_STATE_DIR", str(env_dir))
    result = invoke("install", "-i", DEMO, "--limit", "gpu001", "--dry-run", "-q")
    assert result.exit_code in (0, 1, 3), result.output
    [run_dir] = _run_dirs(env_dir)
    assert f"report: {run_dir / 'report.html'}" in result.output
    assert not (places["here"] / "reports").exists()
