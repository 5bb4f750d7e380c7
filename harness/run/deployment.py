"""What an existing server (an endpoint) serves, read before the run and again after each window.

The first reading goes into the run's fingerprint (``RunPlan.served_endpoints``); a later one that
differs in what names a deployment stops the arm: another deployment is another regime.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from harness.config.arms import Arm
from harness.config.engines import EngineAdapter
from harness.core.errors import EngineError, UserError
from harness.core.secrets import redact_url
from harness.run import engine_http as http
from harness.run.server import ExternalServer, Server

# what names a deployment behind an endpoint: another value of any of them mid-run is another
# deployment, and the arm stops
DEPLOYMENT = ("model", "version", "max_model_len")


def served_before(adapter: EngineAdapter, arm: Arm, startup_timeout_s: float) -> dict[str, Any]:
    """What an endpoint says it serves (its model's id, its release, its context length ...), read
    before anything is measured: it goes into the run's fingerprint (another deployment behind the
    same address is another regime), and an endpoint that does not answer refuses the run now."""
    with (
        tempfile.TemporaryDirectory() as folder,
        ExternalServer.of_arm(arm, adapter.health_path, Path(folder) / "reach.log") as server,
    ):
        try:
            server.wait_ready(startup_timeout_s)
            served = adapter.served_config(server.base_url, None)
        except EngineError as exc:
            raise UserError(f"arms.{arm.name}.endpoint: {exc}") from None
    return served.model_copy(update={"model": server.served_model}).recorded()


def served_now(adapter: EngineAdapter, server: Server | ExternalServer) -> dict[str, Any]:
    """What an endpoint serves now, as ``served_before`` read it before the run."""
    listed = http.get_json(server.base_url, "/v1/models")
    models = listed.get("data") if isinstance(listed, dict) else None
    first = models[0] if isinstance(models, list) and models and isinstance(models[0], dict) else {}
    model = first.get("id") if isinstance(first.get("id"), str) else None
    return adapter.served_config(server.base_url, None).model_copy(update={"model": model}).recorded()


def deployment_change(began: dict[str, Any], base_url: str, now: dict[str, Any], when: str) -> str | None:
    """Why the arm stops, if the deployment behind ``base_url`` is not the one the run ``began`` on:
    another model, release or context length is another regime."""
    changed = [key for key in DEPLOYMENT if key in began and now.get(key) != began[key]]
    if not changed:
        return None
    said = "; ".join(f"{key} {began[key]!r} then, {now.get(key)!r} now" for key in changed)
    return (
        f"the deployment behind {redact_url(base_url)} changed {when}: {said}: another "
        "deployment is another regime, so the arm stops here (its windows so far are kept)"
    )
