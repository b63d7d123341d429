"""Which operators and functions a statement calls, read from PostgreSQL's own parse
tree (`debug_print_parse`), and which of those calls another schema's object could
take over.

PostgreSQL looks an unqualified operator or function up along the session's
search_path, `pg_catalog` first. A built-in whose parameter types match the call's
argument types exactly cannot be displaced: a same-signature object later on the path
is hidden by it. One that matched only through an implicit coercion of an argument (a
domain to its base type, an integer to numeric) or through a polymorphic or variadic
parameter loses to any object, on any schema of the path, whose parameter types are
the arguments' own: `public.>=(job_attempt, job_max_attempts)`, created by a role that
may create in `public`, would run inside our statement as our role. The parse tree
shows both: the chosen operator's or function's oid, and each argument as the parser
coerced it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg

# The node text of outfuncs.c: `{NAME :field value ...}`, lists in parentheses, a
# Const's datum bytes in brackets.
_TOKEN = re.compile(r'[{}()\[\]]|"(?:\\.|[^"\\])*"|(?:\\.|[^\s(){}\[\]])+')
# Each call node and the field naming what it calls.
_CALLS = {
    "OPEXPR": "opno",
    "DISTINCTEXPR": "opno",
    "NULLIFEXPR": "opno",
    "SCALARARRAYOPEXPR": "opno",
    "FUNCEXPR": "funcid",
    "AGGREF": "aggfnoid",
    "WINDOWFUNC": "winfnoid",
}
# Coercion nodes and the field that says how they were asked for: 2 is
# COERCE_IMPLICIT_CAST (0 a call, 1 an explicit cast, 3 SQL syntax such as EXTRACT,
# whose function the parser names pg_catalog's itself).
_COERCIONS = {
    "RELABELTYPE": "relabelformat",
    "FUNCEXPR": "funcformat",
    "COERCEVIAIO": "coerceformat",
    "ARRAYCOERCEEXPR": "coerceformat",
    "CONVERTROWTYPEEXPR": "convertformat",
}
_EXPLICIT_CAST = "1"
_IMPLICIT = "2"
_SQL_SYNTAX = "3"
_POLYMORPHIC = [
    "anyelement",
    "anyarray",
    "anynonarray",
    "anyenum",
    "anyrange",
    "anymultirange",
    "anycompatible",
    "anycompatiblearray",
    "anycompatiblenonarray",
    "anycompatiblerange",
    "anycompatiblemultirange",
    '"any"',
]


def parse_node_text(text: str) -> Any:
    tokens = _TOKEN.findall(text)
    pos = 0

    def value() -> Any:
        nonlocal pos
        token = tokens[pos]
        pos += 1
        if token == "{":
            node: dict[str, Any] = {"_type": tokens[pos]}
            pos += 1
            while tokens[pos] != "}":
                field = tokens[pos][1:]
                pos += 1
                node[field] = value()
                if tokens[pos] == "[":  # a Const's datum bytes follow its length
                    value()
            pos += 1
            return node
        if token == "(":
            items = []
            while tokens[pos] != ")":
                items.append(value())
            pos += 1
            return items
        if token == "[":
            while tokens[pos] != "]":
                pos += 1
            pos += 1
            return None
        return token

    return value()


@dataclass(frozen=True)
class Call:
    kind: str  # "operator" or "function"
    signature: str  # e.g. `>=(integer,integer)`, `unnest(anyarray)`
    name: str  # e.g. `>=`, `unnest`
    why: str  # what lets another schema's object take it over


class Catalog:
    """The names of operators, functions and types by oid, and which are polymorphic
    or variadic."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.operators = {
            str(oid): (name, signature)
            for oid, name, signature in conn.execute(
                "SELECT o.oid, o.oprname, o.oprname || '(' || format_type(o.oprleft, NULL)"
                " || ',' || format_type(o.oprright, NULL) || ')' FROM pg_operator o"
            )
        }
        self.functions = {
            str(oid): (name, signature)
            for oid, name, signature in conn.execute(
                "SELECT p.oid, p.proname, p.oid::regprocedure::text FROM pg_proc p"
            )
        }
        self.types = {
            str(oid): name
            for oid, name in conn.execute("SELECT oid, format_type(oid, NULL) FROM pg_type")
        }
        self.polymorphic_functions = {
            str(oid)
            for (oid,) in conn.execute(
                "SELECT oid FROM pg_proc WHERE provariadic <> 0"
                " OR proargtypes::regtype[]::text[] && %s::text[]",
                [_POLYMORPHIC],
            )
        }
        self.polymorphic_operators = {
            str(oid)
            for (oid,) in conn.execute(
                "SELECT o.oid FROM pg_operator o JOIN pg_proc p ON p.oid = o.oprcode"
                " WHERE p.provariadic <> 0 OR p.proargtypes::regtype[]::text[] && %s::text[]",
                [_POLYMORPHIC],
            )
        }

    def open_calls(self, tree_text: str) -> list[Call]:
        """The calls of one parse tree that another schema's object could take over."""
        found: list[Call] = []
        self._walk(parse_node_text(tree_text), found)
        return found

    def _walk(self, node: Any, found: list[Call]) -> None:
        if isinstance(node, list):
            for item in node:
                self._walk(item, found)
            return
        if not isinstance(node, dict):
            return
        node_type = node["_type"]
        if node_type in _CALLS and node.get("funcformat") not in (
            _EXPLICIT_CAST,
            _IMPLICIT,
            _SQL_SYNTAX,
        ):
            self._check_call(node, found)
        elif node_type == "ROWCOMPAREEXPR":
            self._check_row_comparison(node, found)
        for child in node.values():
            if isinstance(child, (dict, list)):
                self._walk(child, found)

    def _check_call(self, node: dict[str, Any], found: list[Call]) -> None:
        field = _CALLS[node["_type"]]
        oid = node[field]
        if field == "opno":
            kind, (name, signature) = "operator", self.operators[oid]
            polymorphic = oid in self.polymorphic_operators
        else:
            kind, (name, signature) = "function", self.functions[oid]
            polymorphic = oid in self.polymorphic_functions
        if polymorphic:
            found.append(Call(kind, signature, name, "a polymorphic or variadic parameter"))
        for argument in self._arguments(node):
            if self._implicitly_coerced(argument):
                source = self._type_of(argument.get("arg") or (argument.get("args") or [{}])[0])
                found.append(Call(kind, signature, name, f"an implicit coercion of {source}"))

    def _check_row_comparison(self, node: dict[str, Any], found: list[Call]) -> None:
        """`(a, b) < (c, d)`: an operator a pair (`opnos`, an oid list `(o ...)`)."""
        operators = [oid for oid in node.get("opnos") or [] if oid != "o"]
        pairs = zip(operators, node.get("largs") or [], node.get("rargs") or [], strict=False)
        for oid, left, right in pairs:
            name, signature = self.operators[oid]
            for argument in (left, right):
                if self._implicitly_coerced(argument):
                    why = f"an implicit coercion of {self._type_of(argument.get('arg'))}"
                    found.append(Call("operator", signature, name, why))

    @staticmethod
    def _implicitly_coerced(argument: Any) -> bool:
        coercion = _COERCIONS.get(argument["_type"]) if isinstance(argument, dict) else None
        return coercion is not None and argument.get(coercion) == _IMPLICIT

    @staticmethod
    def _arguments(node: dict[str, Any]) -> list[dict[str, Any]]:
        arguments = node.get("args") or []
        if node["_type"] == "AGGREF":  # target entries around each argument
            arguments = [entry.get("expr") for entry in arguments if isinstance(entry, dict)]
        # `name => value`: the value, as the call takes it
        arguments = [
            argument.get("arg")
            if isinstance(argument, dict) and argument["_type"] == "NAMEDARGEXPR"
            else argument
            for argument in arguments
        ]
        return [argument for argument in arguments if isinstance(argument, dict)]

    def _type_of(self, node: Any) -> str:
        if not isinstance(node, dict):
            return "?"
        for field in ("vartype", "consttype", "paramtype", "resulttype", "funcresulttype"):
            if node.get(field):
                return self.types.get(node[field], node[field])
        if node["_type"] == "OPEXPR":
            return self.types.get(node.get("opresulttype", ""), "?")
        return "?"


def trees_of(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """Turns on the parse trees' report on `conn` (as notices: no server log to read)
    and returns the list they are gathered in: (the tree, the context it was parsed in:
    empty for a statement sent by the client, PL/pgSQL's otherwise)."""
    gathered: list[tuple[str, str]] = []

    def gather(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary == "parse tree:" and diag.message_detail:
            gathered.append((" ".join(diag.message_detail.split()), diag.context or ""))

    conn.add_notice_handler(gather)
    conn.execute("SET debug_print_parse = on")
    conn.execute("SET debug_pretty_print = off")
    conn.execute("SET client_min_messages = log")
    gathered.clear()  # the SETs' own trees
    return gathered
