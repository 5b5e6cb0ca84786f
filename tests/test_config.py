"""Finding and reading cli-config.yaml: lookup order, safe YAML 1.2 reading, relative paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from the_loop import yamlsafe
from the_loop.config import find_config, read_config
from the_loop.errors import ConfigError

WriteConfig = Callable[..., Path]


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A working directory and a HOME, each with a .the-loop/cli-config.yaml, plus two more."""
    cwd, home = tmp_path / "work", tmp_path / "home"
    out = {
        "cwd": cwd / ".the-loop" / "cli-config.yaml",
        "home": home / ".the-loop" / "cli-config.yaml",
        "env": tmp_path / "env" / "cli-config.yaml",
        "explicit": tmp_path / "explicit" / "cli-config.yaml",
    }
    for name, path in out.items():
        path.parent.mkdir(parents=True)
        path.write_text(f"loop: {name}\n", encoding="utf-8")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("THE_LOOP_CLI_CONFIG", str(out["env"]))
    return out


def test_r3_lookup_order_config_then_env_then_cwd_then_home(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert read_config(find_config(str(places["explicit"]))).loop == "explicit"
    assert read_config(find_config()).loop == "env"
    monkeypatch.delenv("THE_LOOP_CLI_CONFIG")
    assert read_config(find_config()).loop == "cwd"
    places["cwd"].unlink()
    assert read_config(find_config()).loop == "home"
    places["home"].unlink()
    assert find_config() is None
    assert read_config(find_config()).path is None and read_config(find_config()).hooks is None


def test_an_explicit_relative_config_is_taken_from_the_working_directory(
    places: dict[str, Path],
) -> None:
    assert find_config(".the-loop/cli-config.yaml") == places["cwd"]


def test_relative_paths_resolve_against_the_config_folder_not_the_cwd(
    places: dict[str, Path], write_config: WriteConfig, tmp_path: Path
) -> None:
    cfg = write_config("stateDir: state\n", folder=tmp_path / "ops")
    config = read_config(cfg)
    assert config.folder == tmp_path / "ops"
    assert config.state_dir == tmp_path / "ops" / "state"
    assert config.resolve("~/x") == tmp_path / "home" / "x"
    assert config.resolve("/abs/x") == Path("/abs/x")


def test_the_default_state_dir_is_beside_the_config(write_config: WriteConfig) -> None:
    cfg = write_config("loop: acme\n")
    assert read_config(cfg).state_dir == cfg.parent / ".the-loop"


def test_yaml_1_2_booleans_keep_on_yes_and_no_as_strings() -> None:
    data = yamlsafe.load("on: [session_spawn]\nyes: no\nflag: true\nother: False\n")
    assert data == {"on": ["session_spawn"], "yes": "no", "flag": True, "other": False}


def test_a_key_given_twice_is_refused_with_its_line(write_config: WriteConfig) -> None:
    cfg = write_config("loop: a\nstateDir: s\nloop: b\n")
    with pytest.raises(ConfigError) as info:
        read_config(cfg)
    assert str(info.value) == (
        f"{cfg}: not valid YAML at line 3, column 1: found the key 'loop' twice"
    )


def test_a_merge_key_may_be_overridden_in_the_mapping_that_merges_it() -> None:
    data = yamlsafe.load(
        "hooks:\n"
        "  - &common {name: a, module: acme.a, required: true}\n"
        "  - <<: *common\n"
        "    name: b\n"
    )
    assert data["hooks"][1] == {"name": "b", "module": "acme.a", "required": True}


def test_unsafe_yaml_tags_are_refused(write_config: WriteConfig) -> None:
    cfg = write_config("loop: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_config(cfg)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("hoks: []\n", "unknown top-level key 'hoks' (did you mean 'hooks'?). Allowed keys: "
         "loop, stateDir, hooks, "),
        ("loop: 5\n", "loop must be a string (got 5 that is int)"),
        ("stateDir: [a]\n", "stateDir must be a string (got ['a'] that is list)"),
        ("just text\n", "expected a mapping of keys at the top level, got str"),
    ],
)
def test_a_malformed_file_names_the_file_and_the_key(
    write_config: WriteConfig, text: str, says: str
) -> None:
    cfg = write_config(text)
    with pytest.raises(ConfigError) as info:
        read_config(cfg)
    assert str(info.value).startswith(f"{cfg}: {says}")


def test_an_empty_file_is_an_empty_config(write_config: WriteConfig) -> None:
    config = read_config(write_config(""))
    assert config.data == {} and config.hooks is None and config.loop == ""
