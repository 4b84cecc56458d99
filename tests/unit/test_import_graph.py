"""No import cycle among the modules of service/ and api/ (function-level imports count too).

The layer contracts themselves are import-linter's (pyproject.toml, `make lint`); a cycle is what
they cannot express, so it is checked here on the same graph (grimp, which import-linter uses).
"""

from __future__ import annotations

import grimp


def _cycles(adjacency: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(adjacency):
        if root in index:
            continue
        work = [(root, iter(sorted(adjacency[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(adjacency[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_in_service_or_api() -> None:
    graph = grimp.build_graph("service", "api")
    modules = set(graph.modules)
    adjacency = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    assert _cycles(adjacency) == []


def test_no_module_of_service_or_api_is_over_600_lines() -> None:
    """Small modules (issue 23): one that grows past this is split along its jobs."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sizes = {p: len(p.read_text().splitlines()) for d in ("service", "api") for p in (root / d).rglob("*.py")}
    assert not {str(p.relative_to(root)): n for p, n in sizes.items() if n > 600}
