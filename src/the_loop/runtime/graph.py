"""The phase graph: agent nodes and human gates joined by outcome edges, built in or from YAML.

YAML format (described once in `GRAPH`, checked at load; every error names the node or edge):

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

from pathlib import Path
from typing import Any, Final

from the_loop.configspec import (
    Bool,
    Enum,
    Field,
    Invalid,
    ListOf,
    Mapping,
    Problem,
    Str,
    did_you_mean,
    dotted,
)
from the_loop.errors import ConfigError

PHASES = ("requirements", "design", "testing-plan", "tasks")


class Node:
    """One node of the graph. (Plain classes here and in the runtime's other records: the
    agent's commands load the graph at every start, and a dataclass costs them the
    `dataclasses` import and its generated methods, issue 34. A record that must not change
    marks its fields `Final`, so the type check refuses a write to one.)"""

    __slots__ = ("actor", "name", "phase", "prompt", "request", "terminal")

    def __init__(self, name: str, phase: str, actor: str = "agent", terminal: bool = False,
                 prompt: str = "", request: str = "") -> None:
        self.name: Final = name
        self.phase: Final = phase
        self.actor: Final = actor  # agent | human | none (terminal)
        self.terminal: Final = terminal
        self.prompt: Final = prompt
        self.request: Final = request


class Graph:
    __slots__ = ("edges", "nodes", "start")

    def __init__(self, start: str, nodes: dict[str, Node],
                 edges: dict[tuple[str, str], str] | None = None) -> None:
        self.start = start
        self.nodes = nodes
        #: (from, outcome) → to
        self.edges: dict[tuple[str, str], str] = {} if edges is None else edges

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
    import yaml  # a graph file only: the builtin graph and the commands that use it need none

    from the_loop import yamlsafe

    path = Path(spec)
    try:
        data = yamlsafe.load_file(path)
    except OSError as exc:
        raise ConfigError(f"graph {path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"graph {path}: not valid YAML {yamlsafe.describe_error(exc)}") from None
    return parse_graph(data, str(path))


# ------------------------------------------------------------------ named checks


def _unique_nodes(data: dict[str, Any], _ctx: object) -> dict[str, Any]:
    seen: set[str] = set()
    for i, node in enumerate(data["nodes"]):
        if node["name"] in seen:
            raise Problem("defined twice", "nodes", i)
        seen.add(node["name"])
    return data


def _actors(data: dict[str, Any], _ctx: object) -> dict[str, Any]:
    """A node's actor defaults to agent (none when terminal); only a terminal node has none."""
    for i, node in enumerate(data["nodes"]):
        node.setdefault("actor", "none" if node["terminal"] else "agent")
        node.setdefault("phase", node["name"])
        if node["actor"] == "none" and not node["terminal"]:
            raise Problem("a node that is not terminal needs agent or human", "nodes", i, "actor")
    return data


def _edges_join_nodes(data: dict[str, Any], _ctx: object) -> dict[str, Any]:
    nodes = {n["name"]: n for n in data["nodes"]}
    seen: set[tuple[str, str]] = set()
    for edge in data["edges"]:
        src, outcome, dst = edge["from"], edge["outcome"], edge["to"]
        label = f"edge {src} --{outcome}--> {dst}"
        for end in (src, dst):
            if end not in nodes:
                raise Problem(f"{label}: no node named {end!r}"
                              + did_you_mean(end, list(nodes)) + f"; nodes: {', '.join(nodes)}")
        if nodes[src]["terminal"]:
            raise Problem(f"{label}: a terminal node has no outgoing edges")
        if (src, outcome) in seen:
            raise Problem(f"{label}: node {src!r} already has an edge for outcome {outcome!r}")
        seen.add((src, outcome))
    return data


def _reachable_ends(data: dict[str, Any], _ctx: object) -> dict[str, Any]:
    """A start node exists; every agent node can finish and every gate can approve; an end."""
    names = [n["name"] for n in data["nodes"]]
    data.setdefault("start", names[0] if names else "")
    if data["start"] not in names:
        raise Problem(f"no node named {data['start']!r}" + did_you_mean(data["start"], names)
                      + f"; nodes: {', '.join(names)}", "start")
    for i, node in enumerate(data["nodes"]):
        outs = {e["outcome"] for e in data["edges"] if e["from"] == node["name"]}
        if node["actor"] == "agent" and not node["terminal"] and "done" not in outs:
            raise Problem("an agent node needs an edge with outcome done", "nodes", i)
        if node["actor"] == "human" and not node["terminal"] and "approved" not in outs:
            raise Problem("a human gate needs an edge with outcome approved", "nodes", i)
    if not any(n["terminal"] for n in data["nodes"]):
        raise Problem("no terminal node; mark the last node `terminal: true`")
    return data


# ------------------------------------------------------------------ the description

_TEXT = Str()
NODE = Mapping(expected="a mapping with a name", fields={
    "name": Field(Str(expected="a node name"), required="every node needs a name"),
    "phase": Field(_TEXT),
    "actor": Field(Enum(values=("agent", "human", "none"), expected="agent or human")),
    "terminal": Field(Bool(), default=False),
    "prompt": Field(_TEXT, default=""),
    "request": Field(_TEXT, default=""),
})
EDGE = Mapping(expected="{from, outcome, to}", fields={
    key: Field(Str(), required="an edge is {from, outcome, to}")
    for key in ("from", "outcome", "to")
})
#: A YAML phase graph (`graph:` in cli-config.yaml names the file).
GRAPH = Mapping(
    expected="a mapping with start, nodes (a list) and edges (a list)",
    then=(_unique_nodes, _actors, _edges_join_nodes, _reachable_ends), fields={
        "start": Field(Str(expected="the name of a node")),
        "nodes": Field(ListOf(item=NODE, expected="a list of nodes"),
                       required="a graph lists its nodes"),
        "edges": Field(ListOf(item=EDGE, nullable=True, expected="a list of edges"),
                       default=list),
    })


def parse_graph(data: Any, where: str) -> Graph:
    """Check `data` against `GRAPH`; raises `ConfigError` naming the node or edge."""
    try:
        checked = GRAPH.check(data)
    except Invalid as exc:
        label = _label(data, exc.path)
        raise ConfigError(f"graph {where}: {label}{': ' if label else ''}{exc.message}") from None
    nodes = {n["name"]: Node(n["name"], n["phase"], n["actor"], n["terminal"], n["prompt"],
                             n["request"]) for n in checked["nodes"]}
    edges = {(e["from"], e["outcome"]): e["to"] for e in checked["edges"]}
    return Graph(checked["start"], nodes, edges)


def _label(data: Any, path: tuple[str | int, ...]) -> str:
    """`node 'x' → actor` for ("nodes", 3, "actor"); `edges[2] → to`; `start`."""
    if len(path) >= 2 and path[0] == "nodes" and isinstance(path[1], int):
        raw = data["nodes"][path[1]]
        name = raw.get("name") if isinstance(raw, dict) else None
        head = f"node {name!r}" if isinstance(name, str) else f"nodes[{path[1]}]"
    elif len(path) >= 2 and path[0] == "edges":
        head = f"edges[{path[1]}]"
    else:
        return dotted(path)
    rest = dotted(path[2:])
    return f"{head} → {rest}" if rest else head
