"""Airflow mode's evidence, per policy: what a platform team checks before trusting the executor.

After the DAG run, from the throwaway Airflow itself (its metadata database, its task logs, and
carma's own CLI run with the deployment's environment):

- every task's tries as ``carma why --json`` tells them (carma's store: placement summary,
  fence, end), and whether each try has all three;
- Airflow's task-instance history of each task that was tried more than once (the underdeclared
  task's CUDA OOM must show there as a retry);
- the line of carma's reason in the crashed try's log (``CUDA OOM``, the recovery plan).

Written as ``evidence.json`` in the policy's work folder and summed up in a few printed lines.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_REASON = re.compile(r"(carma|CarmaExecutor).*(OOM|out of memory|retry)", re.IGNORECASE)


def _reasons(text: str) -> list[str]:
    """carma's lines about the OOM in one try's log (Airflow writes JSON lines): the retry
    policy's decision and reason, and the try's own ``[carma] CUDA out of memory ...`` line."""
    found: list[str] = []
    for line in text.splitlines():
        if not _REASON.search(line):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            found.append(line.strip()[-400:])
            continue
        if not isinstance(event, dict):
            continue
        if event.get("event") == "Retry policy decision":
            found.append(f"Airflow's retry policy: {event.get('action')}: {event.get('reason')}")
        elif "[carma]" in str(event.get("event", "")):
            found.append(str(event["event"])[-400:])
    return found


def _carma_why(env: dict[str, str], dag_id: str, task: str) -> list[dict[str, Any]]:
    carma = Path(sys.executable).with_name("carma")
    cmd = [str(carma)] if carma.exists() else [sys.executable, "-c", "from carma_airflow.cli import main; main()"]
    out = subprocess.run(
        [*cmd, "why", f"{dag_id}.{task}", "--json"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if out.returncode != 0:
        return [{"error": (out.stderr or out.stdout).strip()[-500:]}]
    try:
        rows = json.loads(out.stdout)
    except ValueError:
        return [{"error": f"carma why printed no JSON: {out.stdout[-300:]}"}]
    return rows if isinstance(rows, list) else [{"error": "carma why --json gave no list"}]


def collect(stack: Any, dag_id: str, run_id: str, tasks: list[str], run_dir: Path) -> dict[str, Any]:
    """Evidence of one policy's DAG run (see the module's doc); written to run_dir/evidence.json."""
    per_task: dict[str, Any] = {}
    # one `carma why` process per task, side by side: each is mostly its interpreter's start
    # (seconds each on a loaded 2-core machine; one after another, 8 of them took tens of seconds)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(tasks)))) as pool:
        whys = dict(zip(tasks, pool.map(lambda task: _carma_why(stack.env, dag_id, task), tasks), strict=True))
    for task in tasks:
        why = whys[task]
        tries = [
            {
                "try": r.get("try_number"),
                "outcome": r.get("outcome"),
                "summary": r.get("summary"),
                "fence": r.get("fence"),
                "ended": bool(r.get("ended_at")),
            }
            for r in why
            if "error" not in r
        ]
        history = [
            {"try": int(row[0]), "state": str(row[1])}
            for row in stack.query(
                "select try_number, state from task_instance_history "
                "where dag_id = :d and run_id = :r and task_id = :t order by try_number",
                d=dag_id,
                r=run_id,
                t=task,
            )
        ]
        reason = None
        if any(t["outcome"] == "oom" for t in tries):
            for path in stack.run_log(dag_id, run_id, task, 1):
                lines = _reasons(path.read_text(errors="replace"))
                if lines:
                    reason = " | ".join(lines)
                    break
        per_task[task] = {
            "carma_why": tries,
            "carma_why_error": next((r["error"] for r in why if "error" in r), None),
            "airflow_history": history,
            "carma_reason_in_log": reason,
        }
    all_tries = [t for v in per_task.values() for t in v["carma_why"]]
    retried = {k: v["airflow_history"] for k, v in per_task.items() if v["airflow_history"]}
    ev = {
        "tasks": per_task,
        "tries_in_store": len(all_tries),
        "tries_complete": sum(1 for t in all_tries if t["summary"] and t["fence"] and t["ended"]),
        "tries_without_fence": sum(1 for t in all_tries if not t["fence"]),
        "retried_in_airflow": retried,
        "oom_reasons_in_logs": {k: v["carma_reason_in_log"] for k, v in per_task.items() if v["carma_reason_in_log"]},
    }
    (run_dir / "evidence.json").write_text(json.dumps(ev, indent=2, sort_keys=True))
    return ev


def evidence_lines(policy: str, ev: dict[str, Any]) -> list[str]:
    lines = [
        f"[kit] {policy}: carma why: {ev['tries_in_store']} tries in carma's store, "
        f"{ev['tries_complete']} with placement, fence and end ({ev['tries_without_fence']} without a fence)"
    ]
    for task, history in ev["retried_in_airflow"].items():
        states = ", ".join(f"try {h['try']}: {h['state']}" for h in history)
        lines.append(f"[kit] {policy}: Airflow's task-instance history of {task}: {states}")
    for task, reason in ev["oom_reasons_in_logs"].items():
        lines.append(f"[kit] {policy}: carma's reason in {task}'s try-1 log: {reason}")
    return lines
