"""pip's configuration as uv's for ``pipx run`` intakes (:func:`warden.intake._pypi.pip_settings`): pip's order
of precedence, its TLS files, and any pip.conf text at all either read or refused by name, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden.errors import IntakeError
from warden.intake._pypi import pip_settings


def _home(tmp_path: Path, user_conf: str | None = None) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True, exist_ok=True)
    if user_conf is not None:
        (home / ".config" / "pip" / "pip.conf").write_text(user_conf, encoding="utf-8")
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def _site_tls(tmp_path: Path) -> dict[str, str]:
    """What the machine's own /etc pip files give (this user config cannot change them)."""
    return pip_settings(_home(tmp_path / "bare"))[1]


def test_a_variable_beats_the_files_and_a_later_file_beats_an_earlier_one(tmp_path: Path) -> None:
    site = _site_tls(tmp_path)
    env = _home(tmp_path, "[global]\nindex-url = https://user.example/simple/\nextra-index-url = https://a/ https://b/\n")
    (tmp_path / "last.conf").write_text("[global]\nindex-url = https://last.example/simple/\n")
    env["PIP_CONFIG_FILE"] = str(tmp_path / "last.conf")
    assert pip_settings(env) == (["--index-url", "https://last.example/simple/", "--extra-index-url", "https://a/",
                                  "--extra-index-url", "https://b/"], site)
    env["PIP_EXTRA_INDEX_URL"] = ""
    env["PIP_INDEX_URL"] = "https://env.example/simple/"
    assert pip_settings(env) == (["--index-url", "https://env.example/simple/"], site)


def test_tls_files_become_the_variables_uv_reads(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("ca")
    (tmp_path / "client.pem").write_text("client")
    env = _home(tmp_path, f"[global]\ncert = {tmp_path / 'ca.pem'}\nclient-cert = {tmp_path / 'client.pem'}\n")
    assert pip_settings(env) == ([], {"SSL_CERT_FILE": str(tmp_path / "ca.pem"),
                                      "SSL_CLIENT_CERT": str(tmp_path / "client.pem")})


@pytest.mark.parametrize("setting", ["cert", "client-cert"])
def test_a_tls_setting_naming_a_directory_is_refused(setting: str, tmp_path: Path) -> None:
    env = _home(tmp_path, f"[global]\n{setting} = {tmp_path}\n")
    with pytest.raises(IntakeError, match=rf"pip's {setting} setting names {tmp_path}, which is not a file"):
        pip_settings(env)


def test_a_broken_file_is_refused_by_name(tmp_path: Path) -> None:
    env = _home(tmp_path, "index-url = https://no-section.example/\n")
    conf = Path(env["XDG_CONFIG_HOME"]) / "pip" / "pip.conf"
    with pytest.raises(IntakeError, match=rf"pip's configuration {conf} cannot be read: File contains no section"):
        pip_settings(env)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=["Cs"]), max_size=300)
       | st.builds(lambda body: "[global]\n" + body, st.text(max_size=200)))
def test_any_pip_conf_text_is_read_or_refused_by_name(text: str, tmp_path: Path) -> None:
    env = _home(tmp_path, text)
    outcome = _settings_or_refusal(env)
    if isinstance(outcome, str):
        assert outcome.startswith("pip's ")
        return
    options, tls = outcome
    assert all(isinstance(o, str) for o in options)
    assert set(tls) <= {"SSL_CERT_FILE", "SSL_CLIENT_CERT"}


def _settings_or_refusal(env: dict[str, str]) -> tuple[list[str], dict[str, str]] | str:
    try:
        return pip_settings(env)
    except IntakeError as exc:
        return str(exc)
