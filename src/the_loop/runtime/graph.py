"""The phase graph: agent nodes and human gates joined by outcome edges, built in or from YAML.

YAML format (validated at load; every error names the node or edge):

    start: requirements
    nodes:
      - {name: requirements, phase: requirements, actor: agent,
         prompt: "Write the requirements for {title}."}
      - {name: requirements-review, phase: requirements, actor: human,
         request: "Review the requirements; reply /approve or /reject."}
      - {name: done, phase: done, terminal: true}
    edges:
      - {from: requirements, outcome: done, to: requirements-review}
      - {from: requirements-review, outcome: approved, to: done}
      - {from: requirements-review, outcome: rejected, to: requirements}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from the_loop import yamlsafe
from the_loop.errors import ConfigError

PHASES = ("requirements", "design", "testing-plan", "tasks")


@dataclass(frozen=True)
class Node:
    name: str
    phase: str
    actor: str = "agent"  # agent | human | none (terminal)
    terminal: bool = False
    prompt: str = ""
    request: str = ""


@dataclass
class Graph:
    start: str
    nodes: dict[str, Node]
    edges: dict[tuple[str, str], str] = field(default_factory=dict)  # (from, outcome) → to

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def next(self, node: str, outcome: str) -> Node | None:
        to = self.edges.get((node, outcome))
        return self.nodes[to] if to else None

    def outcomes(self, node: str) -> list[str]:
        return sorted(o for (n, o) in self.edges if n == node)


def builtin_graph() -> Graph:
    """requirements → design → testing-plan → tasks → done, a human gate after each."""
    nodes: dict[str, Node] = {}
    edges: dict[tuple[str, str], str] = {}
    for i, phase in enumerate(PHASES):
        nxt = PHASES[i + 1] if i + 1 < len(PHASES) else "done"
        nodes[phase] = Node(
            phase, phase, "agent",
            prompt=f"You are working on {{ref}}: {{title}}.\n\n{{body}}\n\n"
                   f"Phase: {phase}. Write the {phase} document for this work item. Ask "
                   f"with `the-loop ask` when you need a person; finish with "
                   f"`the-loop graph complete`.",
        )
        gate = f"{phase}-review"
        nodes[gate] = Node(
            gate, phase, "human",
            request=f"The {phase} document is ready for review. Reply /approve to move on "
                    f"or /reject to send it back.",
        )
        edges[(phase, "done")] = gate
        edges[(gate, "approved")] = nxt
        edges[(gate, "rejected")] = phase
    nodes["done"] = Node("done", "done", "none", terminal=True)
    return Graph(PHASES[0], nodes, edges)


def load_graph(spec: str) -> Graph:
    """`builtin`, or a YAML file; raises `ConfigError` naming the node or edge."""
    if spec == "builtin":
        return builtin_graph()
    path = Path(spec)
    try:
        data = yamlsafe.load_file(path)
    except OSError as exc:
        raise ConfigError(f"graph {path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"graph {path}: not valid YAML {yamlsafe.describe_error(exc)}") from None
    return parse_graph(data, str(path))


def parse_graph(data: Any, where: str) -> Graph:
    def fail(msg: str) -> ConfigError:
        return ConfigError(f"graph {where}: {msg}")

    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise fail("expected a mapping with start, nodes (a list) and edges (a list)")
    extra = sorted(set(data) - {"start", "nodes", "edges"})
    if extra:
        raise fail(f"unknown key(s) {', '.join(map(str, extra))}; allowed: start, nodes, edges")
    nodes: dict[str, Node] = {}
    for i, raw in enumerate(data["nodes"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise fail(f"nodes[{i}]: expected a mapping with a name, got {raw!r}")
        name = raw["name"]
        bad = sorted(set(raw) - {"name", "phase", "actor", "terminal", "prompt", "request"})
        if bad:
            raise fail(f"node {name!r}: unknown key(s) {', '.join(map(str, bad))}; allowed: "
                       "name, phase, actor, terminal, prompt, request")
        if name in nodes:
            raise fail(f"node {name!r}: defined twice")
        terminal = raw.get("terminal", False)
        if type(terminal) is not bool:
            raise fail(f"node {name!r} → terminal: expected true or false, got {terminal!r}")
        actor = raw.get("actor", "none" if terminal else "agent")
        if actor not in ("agent", "human", "none"):
            raise fail(f"node {name!r} → actor: expected agent or human, got {actor!r}")
        if actor == "none" and not terminal:
            raise fail(f"node {name!r} → actor: a node that is not terminal needs agent or "
                       "human")
        phase = raw.get("phase", name)
        for key in ("phase", "prompt", "request"):
            if key in raw and not isinstance(raw[key], str):
                raise fail(f"node {name!r} → {key}: expected a string, got {raw[key]!r}")
        nodes[name] = Node(name, str(phase), str(actor), terminal, str(raw.get("prompt", "")),
                           str(raw.get("request", "")))
    edges: dict[tuple[str, str], str] = {}
    for i, raw in enumerate(data.get("edges") or []):
        if not isinstance(raw, dict) or set(raw) != {"from", "outcome", "to"}:
            raise fail(f"edges[{i}]: expected {{from, outcome, to}}, got {raw!r}")
        src, outcome, dst = raw["from"], raw["outcome"], raw["to"]
        label = f"edge {src} --{outcome}--> {dst}"
        for end in (src, dst):
            if end not in nodes:
                raise fail(f"{label}: no node named {end!r}; nodes: {', '.join(nodes)}")
        if nodes[src].terminal:
            raise fail(f"{label}: a terminal node has no outgoing edges")
        if (src, outcome) in edges:
            raise fail(f"{label}: node {src!r} already has an edge for outcome {outcome!r}")
        edges[(src, outcome)] = dst
    start = data.get("start", next(iter(nodes), ""))
    if start not in nodes:
        raise fail(f"start: no node named {start!r}; nodes: {', '.join(nodes)}")
    for node in nodes.values():
        outs = [o for (n, o) in edges if n == node.name]
        if node.terminal:
            continue
        if node.actor == "agent" and "done" not in outs:
            raise fail(f"node {node.name!r}: an agent node needs an edge with outcome done")
        if node.actor == "human" and "approved" not in outs:
            raise fail(f"node {node.name!r}: a human gate needs an edge with outcome approved")
    if not any(n.terminal for n in nodes.values()):
        raise fail("no terminal node; mark the last node `terminal: true`")
    return Graph(start, nodes, edges)
