"""Secrets in a regime and in the environment: passed to the server, redacted everywhere the
harness writes or prints (regime.json, study.json, launch.json, environment.json, the terminal,
the engine's own log), kept out of the fingerprints, and restored from the regime file (or the
environment) when a run resumes. The real engine's run with planted secrets is
tests/test_end_to_end.py's main run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.regime import load_regime, stored_regime
from harness.core.errors import UserError
from harness.core.secrets import (
    REDACTED,
    redact_args,
    redact_env,
    redact_url,
    scrub_file,
    secret_name,
    secret_values,
)
from harness.run.sensors.environment import collect_env_vars

ROOT = Path(__file__).resolve().parent.parent
GOOD_TEXT = (ROOT / "regimes" / "cpu_smoke.yaml").read_text().replace("../workloads/", f"{ROOT}/workloads/")
TOKEN = "hf_planted_secret_value"


def _with_secrets(tmp_path: Path, token: str = TOKEN) -> Path:
    data = yaml.safe_load(GOOD_TEXT)
    data["engine"]["env"] = {**data["engine"].get("env", {}), "HF_TOKEN": token}
    data["engine"]["extra_args"] = [*data["engine"].get("extra_args", []), "--hf-token", token]
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_names_and_values_that_are_secret() -> None:
    assert all(secret_name(n) for n in ("HF_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "--hf-token"))
    assert all(secret_name(n) for n in ("--api-key", "--ssl-keyfile-password", "DB_PASS"))
    # numbers named after tokens are not secrets: a flag names its value by its last word
    assert not any(secret_name(n) for n in ("--max-num-batched-tokens", "--dbo-decode-token-threshold"))
    assert not any(secret_name(n) for n in ("VLLM_CPU_KVCACHE_SPACE", "HF_ENDPOINT", "OMP_NUM_THREADS"))
    # a name says so by its last word, or by a word that is a secret anywhere (issue 64: any name
    # with the word TOKEN was taken for one, FAKE_TOKEN_SLEEP included)
    assert all(secret_name(n) for n in ("OPENAI_API_KEY", "HUGGING_FACE_HUB_TOKEN", "AWS_SESSION_TOKEN"))
    assert all(secret_name(n) for n in ("AZURE_CLIENT_SECRET_ID", "DB_PASSWORD_VALUE", "GOOGLE_CREDENTIALS"))
    assert not any(secret_name(n) for n in ("FAKE_TOKEN_SLEEP", "HF_TOKEN_PATH", "TOKENIZERS_PARALLELISM"))
    assert not any(secret_name(n) for n in ("MY_PASSWORD_FILE", "DB_SECRET_DIR"))  # where one is kept
    # a switch named like a secret: its "true" is never searched for in a log (it would scrub every one)
    assert secret_values({"HF_HUB_DISABLE_IMPLICIT_TOKEN": "true", "HF_TOKEN": "tok-1234"}, []) == {
        "tok-1234"
    }
    # and a value of a credential's shape is secret under any name
    shaped = {
        "A": "hf_" + "a1B2" * 6,
        "B": "sk-proj-" + "x9" * 12,
        "C": "ghp_" + "Q" * 36,
        "D": "AKIA" + "ABCDEFGHIJKLMNOP",
        "E": "xoxb-1234-5678-abcdefghij",
        "F": "Authorization: Bearer hf_" + "z" * 30,
    }
    assert set(redact_env(shaped).values()) == {REDACTED, f"Authorization: Bearer {REDACTED}"}
    assert redact_args(["--header", shaped["F"]]) == ["--header", f"Authorization: Bearer {REDACTED}"]
    assert secret_values(shaped, []) == {value.rpartition(" ")[2] for value in shaped.values()}
    # a shape is a whole token: a model path that holds one is a path (a review found 'llama-3-8b-sk-...')
    path = "/models/llama-3-8b-sk-instruct-finetune-v1"
    assert redact_env({"MODEL": path}) == {"MODEL": path} and redact_args(["--tokenizer", path])[1] == path
    assert redact_env({"X": "hf_overrides", "Y": "task-queue-with-a-very-long-name"}) == {
        "X": "hf_overrides",
        "Y": "task-queue-with-a-very-long-name",
    }
    assert redact_url("x https://user:pw@hub.example/y and s3://AKIA@bucket") == (
        f"x https://{REDACTED}@hub.example/y and s3://{REDACTED}@bucket"
    )
    assert redact_args(["--hf-token", "t1", "--max-num-seqs", "8", "--api-key=k2", "--hf-token", "--x"]) == [
        "--hf-token",
        REDACTED,
        "--max-num-seqs",
        "8",
        f"--api-key={REDACTED}",
        "--hf-token",  # no value follows: the next flag is not eaten
        "--x",
    ]
    assert redact_env({"HF_TOKEN": "t", "HF_ENDPOINT": "https://u:p@h", "OMP_NUM_THREADS": "1"}) == {
        "HF_TOKEN": REDACTED,
        "HF_ENDPOINT": f"https://{REDACTED}@h",
        "OMP_NUM_THREADS": "1",
    }
    found = secret_values(
        {"HF_TOKEN": "tok-1234", "HF_ENDPOINT": "https://me:pw12@h"}, ["--hf-token", "abcd"]
    )
    assert found == {"tok-1234", "me:pw12", "abcd"}


def test_the_environment_record_keeps_no_secret() -> None:
    recorded = collect_env_vars({"HF_TOKEN": "hf_abc", "HF_ENDPOINT": "https://user:pass@hub", "VLLM_X": "2"})
    assert recorded == {
        "env": {"HF_ENDPOINT": f"https://{REDACTED}@hub", "HF_TOKEN": REDACTED, "VLLM_X": "2"}
    }


def test_the_fingerprint_is_of_the_redacted_regime(tmp_path: Path) -> None:
    one = load_regime(_with_secrets(tmp_path))
    other = load_regime(_with_secrets(tmp_path, "hf_another_value"))
    assert one.fingerprint() == other.fingerprint()  # rotating a token is not another regime
    assert one.redacted().engine.env["HF_TOKEN"] == REDACTED and TOKEN not in one.redacted().model_dump_json()
    smoke = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    assert smoke.redacted() == smoke  # a regime without secrets: its fingerprint is as before


def test_a_resumed_regime_gets_its_secrets_back_from_the_file_or_the_environment(
    tmp_path: Path, monkeypatch
) -> None:
    path = _with_secrets(tmp_path)
    regime = load_regime(path)
    stored = regime.redacted().model_dump(mode="json")
    assert stored_regime(stored, path) == regime
    # the file no longer sets the variable: the server inherits it from the environment
    data = yaml.safe_load(path.read_text())
    del data["engine"]["env"]["HF_TOKEN"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("HF_TOKEN", "from-the-environment")
    restored = stored_regime(stored, path)
    assert "HF_TOKEN" not in restored.engine.env and restored.engine.extra_args == regime.engine.extra_args
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(UserError, match=r"engine.env.HF_TOKEN: its value was not stored \(a secret\)"):
        stored_regime(stored, path)
    # the file's extra_args changed: the argument's secret cannot be placed
    data["engine"]["env"]["HF_TOKEN"] = TOKEN
    data["engine"]["extra_args"] = data["engine"]["extra_args"][:-2]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError, match=r"engine.extra_args\[\d+\]: its secret was not stored"):
        stored_regime(stored, path)


def test_validate_prints_no_secret(tmp_path: Path) -> None:
    path = _with_secrets(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_ENDPOINT": "https://me:pw-planted@hub"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "--hf-token '<redacted>'" in out.stdout and "HF_TOKEN='<redacted>'" in out.stdout
    assert TOKEN not in out.stdout + out.stderr and "pw-planted" not in out.stdout + out.stderr


def test_an_engine_log_is_scrubbed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"INFO non-default args: {{'hf_token': '{TOKEN}', 'hf_endpoint': 'https://me:pw1@hub'}}\n")
    scrub_file(log, {TOKEN})
    assert (
        log.read_text()
        == f"INFO non-default args: {{'hf_token': '{REDACTED}', 'hf_endpoint': 'https://{REDACTED}@hub'}}\n"
    )


@pytest.mark.parametrize(
    "secret",
    ["hf_BACK\\SLASHsecret7", 'it\'s "quoted" both ways', "tab\there\nnewline", "caf\u00e9-\u00fcml"],
)
def test_a_secret_is_scrubbed_in_each_form_a_log_writes_it(tmp_path: Path, secret: str) -> None:
    """vLLM logs its non-default arguments as a dict's repr: a backslash doubled, a quote escaped
    (issue 64: 'hf_BACK\\\\SLASHsecret7' survived the scrub); JSON logs escape their own way."""
    import json

    log = tmp_path / "server.log"
    written = [repr({"hf_token": secret}), json.dumps({"hf_token": secret}), repr([repr(secret)]), secret]
    log.write_text("\n".join(written) + "\n")
    scrub_file(log, {secret})
    text = log.read_text()
    assert text.count(REDACTED) == len(written), text
    assert not any(piece in text for piece in ("BACK", "quoted", "here", "caf"))


def test_a_url_credential_in_a_plain_variable_is_restored_on_resume(tmp_path: Path) -> None:
    data = yaml.safe_load(GOOD_TEXT)
    data["engine"]["env"] = {"HF_ENDPOINT": "https://me:pw-planted@hub.example/x"}
    path = tmp_path / "regime.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    regime = load_regime(path)
    stored = regime.redacted().model_dump(mode="json")
    assert stored["engine"]["env"]["HF_ENDPOINT"] == f"https://{REDACTED}@hub.example/x"
    assert stored_regime(stored, path) == regime


def test_a_per_start_key_is_never_read_as_a_flag() -> None:
    """SGLang merges the key file into `--api-key KEY`: a key starting with "-" would be read as a
    flag with no value and the server would not start (urlsafe keys did, 1 start in 64)."""
    import shutil

    from harness.run.server import api_key_file

    for _ in range(200):
        key, path = api_key_file()
        shutil.rmtree(path.parent)
        assert key[0].isalnum() and len(key) >= 32


# What issue 70 planted: a secret given in --set's mapping form, an endpoint's key (sent as a Bearer
# header) and the password of an endpoint's URL (sent as a Basic header), each echoed back by a
# server's error page.
SET_SECRET = "sekrit-value-42"
ENDPOINT_KEY = "key-0123456789abcdef"
URL_PASSWORD = "pa55word-xyz"
BASIC = "dXMzcjpwYTU1d29yZC14eXo="  # base64 of us3r:pa55word-xyz, as a Basic header carries it
PASSPHRASE = "passphrase-value-79"  # issue 79: a name whose secret word is not the last-word rule's


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=300,
    )


def endpoint_run(folder: Path, mode: str, baseline_mode: str | None = None) -> tuple[Path, str]:
    """A whole ``bench run`` whose two arms are existing servers (tests/hostile_server.py with
    ``--every mode``, one each, no engine; the baseline's ``baseline_mode`` where given): the baseline
    reached through ``us3r:PASSWORD@``, ngram_k4 with a key (``api_key_env``), and a secret set in
    ``engine.env`` by --set's mapping form. The run's directory and everything it printed."""
    from tests.conftest import local_server

    data = yaml.safe_load((ROOT / "tests" / "regimes" / "cpu_e2e.yaml").read_text())
    data["workloads"] = [str(ROOT / "workloads" / "code_humaneval.yaml")]
    data["load"] = {**data["load"], "concurrency": [1], "num_prompts": 2, "warmup_requests": 0}
    data["load"].pop("ramp")
    data["engine"] |= {"extra_args": [], "env": {}}
    regime = folder / "endpoints.yaml"
    regime.write_text(yaml.safe_dump(data, sort_keys=False))
    server = (ROOT / "tests" / "hostile_server.py", "--every", mode)
    baseline_server = (ROOT / "tests" / "hostile_server.py", "--every", baseline_mode or mode)
    with local_server(*baseline_server) as plain, local_server(*server) as url:
        where = plain.removeprefix("http://")
        out = bench(
            "run",
            str(regime),
            "--results-dir",
            str(folder / "results"),
            "--allow-mismatch",
            "--endpoint",
            f"baseline=http://us3r:{URL_PASSWORD}@{where}",
            "--endpoint",
            f"ngram_k4={url}",
            "--set",
            "arms.ngram_k4.api_key_env=BENCH_ENDPOINT_KEY",
            "--set",
            f"engine.env={{MY_API_KEY: {SET_SECRET}, OMP_NUM_THREADS: '1'}}",
            "--set",
            f"engine.env.SIGNING_PASSPHRASE={PASSPHRASE}",
            env={"BENCH_ENDPOINT_KEY": ENDPOINT_KEY},
        )
    (run,) = (folder / "results").glob("*/*")
    return run, out.stdout + out.stderr


def test_no_secret_of_the_command_line_or_an_endpoint_reaches_a_file_or_the_terminal(tmp_path: Path) -> None:
    """Issue 70, item 7: the mapping form of --set redacted like the dotted form, and a key or a
    URL's credentials that an endpoint echoes in an error body scrubbed from every stored error:
    samples.jsonl, the arm's status, summary.json, analysis.json, the export, the report, the
    terminal of bench run and bench show; issue 79, item 10: a SIGNING_PASSPHRASE set by the dotted
    form the same (regime.json, summary.json, analysis.json, launch.json). The baseline's gateway
    refuses its first request only (a baseline whose every request fails stops the run before
    ngram_k4 starts: issue 78)."""
    run, printed = endpoint_run(tmp_path, "echo-auth", baseline_mode="echo-auth-first")
    assert "arm ngram_k4 failed" in printed, printed[-3000:]
    shown = bench("show", str(run))
    exported = bench("export", str(run))
    report = bench("report", str(run), "-o", str(run / "report.html"))
    assert exported.returncode == 0 and report.returncode == 0, exported.stderr + report.stderr
    outputs = printed + shown.stdout + shown.stderr + exported.stdout + report.stdout
    files = {path: path.read_text(errors="replace") for path in run.rglob("*") if path.is_file()}
    assert {
        "samples.jsonl",
        "requests.csv",
        "summary.json",
        "analysis.json",
        "report.html",
        "regime.json",
        "launch.json",
    } <= {path.name for path in files}
    for secret in (SET_SECRET, ENDPOINT_KEY, URL_PASSWORD, BASIC, PASSPHRASE):
        assert secret not in outputs, secret
        assert [path.name for path, text in files.items() if secret in text] == [], secret
    # what was set and what the server said are still there, the secrets in them redacted
    assert f"engine.env={{MY_API_KEY: {REDACTED}, OMP_NUM_THREADS: '1'}}" in " ".join(printed.split())
    assert f"engine.env.SIGNING_PASSPHRASE={REDACTED}" in " ".join(printed.split())
    samples = (run / "arms" / "ngram_k4" / "samples.jsonl").read_text()
    assert f"HTTP 401: refused: Bearer {REDACTED}" in samples
    assert f"HTTP 401: refused: Basic {REDACTED}" in (run / "arms" / "baseline" / "samples.jsonl").read_text()


# Issue 79, item 10: names the last-word rule missed, and the names that must stay public.
SECRET_NAMES = (
    "SIGNING_PASSPHRASE",
    "API_TOKENS",
    "PRIVATE_KEY_PEM",
    "PGPASSWORD",
    "MYSQL_PWD",
    "GITHUB_PAT",
    "JWT",
    "SESSION_COOKIE",
    "AUTH_HEADER",
    "--db-passphrase",
    "SERVICE_CREDENTIAL",
    "X-Amz-Signature",
    "apiKey",
    "accessToken",
)
PUBLIC_NAMES = (
    "MAX_TOKENS",
    "NUM_SPECULATIVE_TOKENS",
    "--max-num-batched-tokens",
    "--speculative-num-draft-tokens",
    "HF_TOKEN_PATH",
    "FAKE_TOKEN_SLEEP",
    "TOKENIZERS_PARALLELISM",
    "PWD",
    "--mask-token-id",
    "--allow-credentials",
    "--auth-root-authentication-method",
    "CHARS_PER_TOKEN",
)


def test_a_secret_word_in_any_position_makes_a_name_secret() -> None:
    assert [name for name in SECRET_NAMES if not secret_name(name)] == []
    assert [name for name in PUBLIC_NAMES if secret_name(name)] == []
    assert redact_env(dict.fromkeys(SECRET_NAMES, "v-1234")) == dict.fromkeys(SECRET_NAMES, REDACTED)


def _engine_and_regime_names() -> set[str]:
    """Every flag the engines' modules name and every variable a shipped or test regime sets."""
    import re

    names = {
        flag
        for path in (ROOT / "harness" / "config" / "engines").rglob("*.py")
        for flag in re.findall(r"[\"'](--[a-z][a-z0-9-]+)", path.read_text())
    }
    for path in [*(ROOT / "regimes").rglob("*.yaml"), *(ROOT / "tests" / "regimes").rglob("*.yaml")]:
        engine = (yaml.safe_load(path.read_text()) or {}).get("engine") or {}
        names |= set(engine.get("env") or {})
        names |= {arg.partition("=")[0] for arg in engine.get("extra_args") or [] if arg.startswith("--")}
    return names


def test_no_engine_flag_or_regime_variable_is_taken_for_a_secret() -> None:
    """The rule reads a secret word anywhere: the engines' own flags and the regimes' variables that
    name numbers, paths and switches (--max-num-batched-tokens, VLLM_CPU_KVCACHE_SPACE) stay public
    (a redacted number would be a regime no one can read back), the credentials stay secret."""
    names = _engine_and_regime_names()
    assert len(names) > 40 and "--max-num-batched-tokens" in names
    assert sorted(name for name in names if secret_name(name)) == ["--api-key"]


def test_a_secret_query_parameter_is_scrubbed() -> None:
    url = "http://127.0.0.1:8000?api_key=K1234&max_tokens=8&access_token=T1234&sig=S1234&x=1"
    assert redact_url(url) == (
        f"http://127.0.0.1:8000?api_key={REDACTED}&max_tokens=8&access_token={REDACTED}&sig={REDACTED}&x=1"
    )
    assert redact_url(redact_url(url)) == redact_url(url)  # a second pass adds nothing
    assert redact_url("https://h/p?password=p%40ss-1&amp;token=t-99") == (
        f"https://h/p?password={REDACTED}&amp;token={REDACTED}"
    )
    assert secret_values({"HF_ENDPOINT": "https://h?token=t%2B123"}, []) == {"t%2B123", "t+123"}
    from harness.core.secrets import sent_credentials

    assert sent_credentials("http://h:1?key=k-5678&n=2", None) == {"k-5678"}


def test_an_endpoints_query_key_is_never_echoed(tmp_path: Path) -> None:
    """The endpoint's refusal named the whole URL, ?api_key= and all."""
    regime = ROOT / "tests" / "regimes" / "cpu_e2e.yaml"
    for endpoint in ("ngram_k4=http://127.0.0.1:9?api_key=qk-planted-1", "other=http://h?token=qk-planted-1"):
        out = bench("validate", str(regime), "--endpoint", endpoint)
        assert out.returncode == 2 and "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
        assert "qk-planted-1" not in out.stdout + out.stderr and f"={REDACTED}" in out.stdout
