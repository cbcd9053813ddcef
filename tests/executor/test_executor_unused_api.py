"""No dead code in the executor (issue 24 item 10): every public class, function and method of
``carma_airflow/executor`` is named somewhere in the product (the package, bench/, tools/), not
only in tests.  A test hook in a production class (``TryBook.forget_all``, ``count_started``) or
a reason the placer never produces fails here; Airflow's executor contract, which Airflow calls
and nothing of ours does, is listed by name.

A static scan by name (cheap, no import): a name used anywhere counts as used, so it finds
what nothing names, not every unused overload.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("carma_airflow", "bench", "tools")
# what Airflow's scheduler calls on an executor (BaseExecutor's contract): no caller of ours
AIRFLOW_CONTRACT = {
    ("CarmaExecutor", "terminate"),
    ("CarmaExecutor", "slots_available"),
    ("CarmaExecutor", "try_adopt_task_instances"),
    ("CarmaExecutor", "revoke_task"),
    ("CarmaExecutor", "get_cli_commands"),
}


def _names_used() -> set[str]:
    """Every name the product uses: attributes, names, imports, strings (not ``__all__``'s)."""
    used: set[str] = set()
    for top in PRODUCT:
        for path in (ROOT / top).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            exported = {id(node) for stmt in ast.walk(tree) if _is_all(stmt) for node in ast.walk(stmt.value)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    used.add(node.attr)
                elif isinstance(node, ast.Name):
                    used.add(node.id)
                elif isinstance(node, ast.alias):
                    used.add(node.name.rsplit(".", 1)[-1])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exported:
                    used.add(node.value)
    return used


def _is_all(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)


def _public_definitions(path: Path) -> list[tuple[str | None, str]]:
    """(class, name) of each public module-level function or class and each public method."""
    out: list[tuple[str | None, str]] = []
    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and not stmt.name.startswith("_"):
            out.append((None, stmt.name))
        if isinstance(stmt, ast.ClassDef):
            out += [
                (stmt.name, f.name)
                for f in stmt.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("_")
            ]
    return out


def test_everything_public_in_the_executor_is_used_by_the_product() -> None:
    used = _names_used()
    unused = [
        f"{path.relative_to(ROOT)}: {cls + '.' if cls else ''}{name}"
        for path in sorted((ROOT / "carma_airflow" / "executor").glob("*.py"))
        for cls, name in _public_definitions(path)
        if name not in used and (cls, name) not in AIRFLOW_CONTRACT
    ]
    assert unused == [], "named only by tests, or by nothing: remove it (or name it in AIRFLOW_CONTRACT)"


def test_every_reason_and_outcome_of_a_decision_is_produced_or_read() -> None:
    """``Reason.AVOID``, ``Reason.HOST`` and ``Outcome.ERROR`` were members nothing made: each
    member of the decision's enums is named as ``Enum.MEMBER`` outside its definition."""
    path = ROOT / "carma_airflow" / "core" / "decision.py"
    enums = {
        stmt.name: [
            t.id
            for s in stmt.body
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name) and not t.id.startswith("__")  # members, not the class's dunders
        ]
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(stmt, ast.ClassDef) and any(isinstance(b, ast.Attribute) and b.attr == "Enum" for b in stmt.bases)
    }
    assert set(enums) == {"Outcome", "Reason"}
    named: set[tuple[str, str]] = set()
    for top in PRODUCT:
        for source in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in enums:
                    named.add((node.value.id, node.attr))
    never = [f"{enum}.{member}" for enum, members in enums.items() for member in members if (enum, member) not in named]
    assert never == []
