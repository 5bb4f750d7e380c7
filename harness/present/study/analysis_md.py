"""A study's derived files, written by the study when it ends and refreshed by `bench show STUDY`
(which reads a study and never imports its execution): ``analysis.md``, its tables as Markdown for
design docs, and ``policy.json`` / ``policy.yaml`` (with an SGLang adaptive config file per EAGLE
schedule), the speculation policy with the engine configuration that runs it."""

from __future__ import annotations

import yaml

from harness.derive.study.collect import StudyResults
from harness.present.study.tables import markdown
from harness.results.files import write_json_atomic, write_text_atomic
from harness.results.study.policy_file import POLICY_JSON, POLICY_YAML

ANALYSIS_FILE = "analysis.md"


def write_analysis(results: StudyResults) -> None:
    """``analysis.md`` and the policy files."""
    write_text_atomic(results.root / ANALYSIS_FILE, markdown(results))
    found = results.policy_file()
    document = found.model_dump(mode="json")
    write_json_atomic(results.root / POLICY_JSON, document)
    header = (
        f"# The speculation policy of study {found.study} (derived; {POLICY_JSON} is the same document)\n"
    )
    write_text_atomic(
        results.root / POLICY_YAML,
        header + yaml.safe_dump(document, sort_keys=False, width=100, default_flow_style=None),
    )
    for schedule in found.schedules:
        if schedule.adaptive_config is not None and schedule.adaptive_config_file is not None:
            write_json_atomic(results.root / schedule.adaptive_config_file, schedule.adaptive_config)
