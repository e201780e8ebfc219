"""A workflow's steps: what one is, how a version stores them, and the checks Lakeport can
make before a run.

A step is Spark SQL or a PySpark function. SQL steps see earlier steps as views named after
them; a Python step defines `run(spark, <earlier steps it needs>)` and returns a DataFrame.
The checks here need no Spark: Python code is compiled and its `run` signature inspected;
SQL gets a lexical check (one query, balanced quotes and parentheses, no reference to a
later step), then sqlglot's Spark-dialect parser, which points at the line and column of a
grammar error. Spark has the final word when the workflow runs.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, replace

import sqlglot
from sqlglot.errors import ParseError

from compute.contract import (
    PUBLISH_MODES,
    RESERVED_STEP_NAMES,
    STEP_KINDS,
    STEP_NAME,
    Publish,
    Step,
)
from compute.run import checks

KINDS = STEP_KINDS
MODES = PUBLISH_MODES
MAX_STEPS = 50
MAX_CODE_CHARS = 100_000
SQL_QUERY_STARTS = ("SELECT", "WITH", "VALUES", "TABLE", "FROM")


def dumps(steps: list[Step]) -> str:
    return json.dumps([step.to_dict() for step in steps])


def loads(text: str) -> list[Step]:
    return [Step.from_dict(item) for item in json.loads(text)]


# --- Editing: pure list operations, the editor form holds the state ---


def starter_step(kind: str, steps: list[Step]) -> Step:
    """A new step at the end: a free name, and code that reads the step before it."""
    taken = {step.name for step in steps}
    number = len(steps) + 1
    while f"step_{number}" in taken:
        number += 1
    previous = steps[-1].name if steps else None
    if kind == "python":
        code = (
            f"def run(spark, {previous}):\n    return {previous}"
            if previous
            else "def run(spark):\n    return spark.range(10)"
        )
    else:
        code = f"SELECT * FROM {previous}" if previous else "SELECT 1 AS one"
    return Step(name=f"step_{number}", kind=kind, code=code)


def moved(steps: list[Step], index: int, offset: int) -> list[Step]:
    target, reordered = index + offset, list(steps)
    if 0 <= index < len(steps) and 0 <= target < len(steps):
        reordered[index], reordered[target] = reordered[target], reordered[index]
    return reordered


def removed(steps: list[Step], index: int) -> list[Step]:
    return [step for position, step in enumerate(steps) if position != index]


def normalized(step: Step) -> Step:
    """As saved: Unix line ends (browsers send CRLF) and no trailing blank space; a publish
    target without a table is none."""
    publish = step.publish
    if publish is not None:
        table = publish.table.strip()
        # Checks without a table stay, so the check says what they lack.
        keep = table or publish.checks
        publish = (
            Publish(table, publish.mode.strip(), publish.checks, publish.keys) if keep else None
        )
    return replace(
        step,
        name=step.name.strip(),
        code=step.code.replace("\r\n", "\n").rstrip(),
        publish=publish,
    )


# --- Checks ---


@dataclass
class StepsCheck:
    """What is wrong with a list of steps: messages for the whole list, and per step index
    a field ("name", "kind", "code", "publish", "checks") → messages."""

    workflow: list[str]
    steps: dict[int, dict[str, list[str]]]

    @property
    def ok(self) -> bool:
        return not self.workflow and not self.steps


def check_steps(steps: list[Step]) -> StepsCheck:
    result = StepsCheck(workflow=[], steps={})
    if not steps:
        result.workflow.append("A workflow needs at least one step.")
    if len(steps) > MAX_STEPS:
        result.workflow.append(f"A workflow has at most {MAX_STEPS} steps.")
    names = [step.name for step in steps]
    published: dict[str, str] = {}  # table → the first step publishing to it
    for index, step in enumerate(steps):
        errors = check_step(step, earlier=names[:index], later=names[index + 1 :])
        if step.publish is not None and "publish" not in errors:
            if (first := published.setdefault(step.publish.table, step.name)) != step.name:
                errors["publish"] = [
                    f"Step “{first}” already publishes to {step.publish.table}: one step per table."
                ]
        if errors:
            result.steps[index] = errors
    return result


def check_step(step: Step, earlier: list[str], later: list[str]) -> dict[str, list[str]]:
    """Field → messages for one step, given the names of the steps before and after it."""
    errors: dict[str, list[str]] = {}
    if name_error := _check_name(step.name, earlier):
        errors["name"] = [name_error]
    if step.kind not in KINDS:
        errors["kind"] = ["Choose Spark SQL or a PySpark function."]
        return errors
    if not step.code.strip():
        code_errors = ["Write the step's code."]
    elif len(step.code) > MAX_CODE_CHARS:
        code_errors = [f"At most {MAX_CODE_CHARS:,} characters of code per step."]
    elif step.kind == "python":
        code_errors = check_python(step.code, step.name, earlier, later)
    else:
        code_errors = check_sql(step.code, step.name, earlier, later)
    if code_errors:
        errors["code"] = code_errors
    if step.publish is not None and (problem := step.publish.problem()):
        errors["publish"] = [problem]
    if step.publish is not None and (check_errors := checks.problems(step.publish.checks)):
        errors["checks"] = check_errors  # compute/run/checks.py: the unit checks them again
    return errors


def _check_name(name: str, earlier: list[str]) -> str | None:
    if not name:
        return "Name the step."
    if not STEP_NAME.fullmatch(name):
        return "1–40 characters: lowercase letters, digits and _, starting with a letter."
    if name in RESERVED_STEP_NAMES:
        return f"“{name}” is reserved in Python; choose another name."
    if name in earlier:
        return f"A step above is already called “{name}”."
    return None


def _reference_error(
    reference: str, own_name: str, earlier: list[str], later: list[str]
) -> str | None:
    if reference == own_name:
        return f"The step reads itself (“{reference}”): a step can only read the steps above it."
    if reference in later and reference not in earlier:
        return f"“{reference}” is a later step: a step can only read the steps above it."
    return None


def check_python(code: str, own_name: str, earlier: list[str], later: list[str]) -> list[str]:
    """Compile the code and check that it defines run(spark, <earlier steps>)."""
    try:
        compile(code, f"<step {own_name}>", "exec")
    except SyntaxError as error:
        where = f"Line {error.lineno}: " if error.lineno else ""
        return [f"{where}{error.msg}."]
    except ValueError as error:  # e.g. a NUL character in the source
        return [f"The code cannot be compiled: {error}."]
    definitions = [
        node
        for node in ast.parse(code).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "run"
    ]
    if not definitions:
        return ["Define a top-level function run(spark, …) that returns a DataFrame."]
    run = definitions[-1]  # the last definition is the one Python keeps
    if isinstance(run, ast.AsyncFunctionDef):
        return ["run must be a plain function (def), not async def."]
    arguments = run.args
    if arguments.vararg or arguments.kwarg:
        return ["Name the earlier steps run() needs as parameters instead of *args or **kwargs."]
    positional = [argument.arg for argument in (*arguments.posonlyargs, *arguments.args)]
    if not positional or positional[0] != "spark":
        return ["run's first parameter must be spark."]
    errors = []
    for parameter in positional[1:] + [argument.arg for argument in arguments.kwonlyargs]:
        problem = _reference_error(parameter, own_name, earlier, later)
        if problem is None and parameter not in earlier:
            problem = (
                f"run() takes “{parameter}”, but no step above has that name "
                f"(steps above: {', '.join(earlier) or 'none'})."
            )
        if problem:
            errors.append(problem)
    return errors


@dataclass
class _Token:
    kind: str  # "word" | "quoted" | "string" | "punct"
    text: str
    line: int


class _SqlSyntaxError(Exception):
    pass


def check_sql(code: str, own_name: str, earlier: list[str], later: list[str]) -> list[str]:
    """A lexical check of one Spark SQL query; Spark checks the grammar when it runs."""
    try:
        tokens = _sql_tokens(code)
    except _SqlSyntaxError as error:
        return [str(error)]
    for position, token in enumerate(tokens):
        if token.text == ";" and any(t.text != ";" for t in tokens[position + 1 :]):
            return [f"Line {token.line}: one query per step; remove what follows the “;”."]
    tokens = [token for token in tokens if token.text != ";"]
    if not tokens:
        return ["Write a query, e.g. SELECT * FROM datasets.orders."]
    first = tokens[0]
    if first.kind != "word" or first.text.upper() not in SQL_QUERY_STARTS:
        return ["A SQL step is one query: start it with SELECT or WITH."]
    if grammar_error := _sql_grammar_error(code) or _sql_empty_item_error(code):
        return [grammar_error]
    return _sql_reference_errors(tokens, own_name, earlier, later)


# sqlglot names a clause left incomplete by its expression class ("… missing for <class '…Where'>").
_MISSING_PART = re.compile(r"^Required keyword: '\w+' missing for <class '(?:[\w.]+\.)?(\w+)'>")
_CLAUSE_WORDS = {
    "EQ": "=",
    "NEQ": "<>",
    "GT": ">",
    "LT": "<",
    "GTE": ">=",
    "LTE": "<=",
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "Div": "/",
    "And": "AND",
    "Or": "OR",
}


def _sql_grammar_error(code: str) -> str | None:
    """Spark SQL's grammar, as sqlglot parses it: 'Line 3, column 7: …' for the first error."""
    try:
        sqlglot.parse_one(code, dialect="spark")
    except ParseError as error:
        detail = error.errors[0] if error.errors else {}
        description = detail.get("description") or str(error)
        if missing := _MISSING_PART.match(description):
            part = missing.group(1)
            description = (
                f"{_CLAUSE_WORDS.get(part, part.upper())} is incomplete: something is missing here"
            )
        line, column = detail.get("line"), detail.get("col")
        where = f"Line {line}, column {column}: " if line else ""
        return f"{where}{description}."
    return None


# What cannot follow a comma in a list (sqlglot accepts `SELECT a,, b` and `SELECT a, FROM t`; Spark does not).
_AFTER_A_COMMA_NOTHING = {
    "COMMA",
    "R_PAREN",
    "FROM",
    "WHERE",
    "GROUP_BY",
    "ORDER_BY",
    "HAVING",
    "LIMIT",
}


def _sql_empty_item_error(code: str) -> str | None:
    """'Line 1, column 11: nothing between “,” and “,”.' for an empty item in a list."""
    try:
        tokens = sqlglot.tokenize(code, dialect="spark")
    except sqlglot.errors.TokenError:
        return None
    for comma, following in zip(tokens, tokens[1:]):
        if comma.token_type.name == "COMMA" and following.token_type.name in _AFTER_A_COMMA_NOTHING:
            return (
                f"Line {comma.line}, column {comma.col}: nothing between “,” and “{following.text}”; "
                "remove the comma or add what goes there."
            )
    return None


def _sql_reference_errors(
    tokens: list[_Token], own_name: str, earlier: list[str], later: list[str]
) -> list[str]:
    """Unqualified names after FROM or JOIN that are this step or a later one.

    Names defined in the query itself (WITH name AS (...)) shadow steps and are skipped."""
    defined = {
        tokens[i].text.lower()
        for i in range(len(tokens) - 2)
        if tokens[i].kind in ("word", "quoted")
        and tokens[i + 1].text.upper() == "AS"
        and tokens[i + 2].text == "("
    }
    errors = []
    for position, token in enumerate(tokens[:-1]):
        if token.kind != "word" or token.text.upper() not in ("FROM", "JOIN"):
            continue
        following = tokens[position + 1]
        qualified = position + 2 < len(tokens) and tokens[position + 2].text == "."
        if following.kind not in ("word", "quoted") or qualified:
            continue
        name = following.text.lower()
        problem = None if name in defined else _reference_error(name, own_name, earlier, later)
        if problem and f"Line {following.line}: {problem}" not in errors:
            errors.append(f"Line {following.line}: {problem}")
    return errors


def _sql_tokens(code: str) -> list[_Token]:
    """Words, quoted identifiers, string literals and punctuation, without comments.

    Raises _SqlSyntaxError for an unclosed string, identifier, comment or parenthesis."""
    tokens: list[_Token] = []
    open_parens: list[int] = []
    line, i, length = 1, 0, len(code)
    while i < length:
        char = code[i]
        if char.isspace():
            line += char == "\n"
            i += 1
        elif code.startswith("--", i):
            end = code.find("\n", i)
            i = length if end < 0 else end
        elif code.startswith("/*", i):
            end = code.find("*/", i + 2)
            if end < 0:
                raise _SqlSyntaxError(f"Line {line}: a /* comment is not closed.")
            line += code.count("\n", i, end)
            i = end + 2
        elif char in "'\"`":
            start_line, end = line, _closing_quote(code, i)
            if end < 0:
                what = "identifier" if char == "`" else "string"
                raise _SqlSyntaxError(
                    f"Line {start_line}: the {what} opened with {char} is not closed."
                )
            text = code[i + 1 : end]
            line += text.count("\n")
            kind = "quoted" if char == "`" else "string"
            tokens.append(
                _Token(kind, text.replace("``", "`") if kind == "quoted" else text, start_line)
            )
            i = end + 1
        elif char.isalpha() or char == "_":
            end = i
            while end < length and (code[end].isalnum() or code[end] == "_"):
                end += 1
            tokens.append(_Token("word", code[i:end], line))
            i = end
        else:
            if char == "(":
                open_parens.append(line)
            elif char == ")":
                if not open_parens:
                    raise _SqlSyntaxError(f"Line {line}: this “)” has no matching “(”.")
                open_parens.pop()
            tokens.append(_Token("punct", char, line))
            i += 1
    if open_parens:
        raise _SqlSyntaxError(f"Line {open_parens[-1]}: this “(” is not closed.")
    return tokens


# A whole literal by its opening quote: strings escape with a backslash (Spark's default),
# identifiers double the backtick. Possessive, so an escape is never read back as a closing quote.
_LITERALS = {
    "'": re.compile(r"'(?:\\.|[^'\\])*+'", re.S),
    '"': re.compile(r'"(?:\\.|[^"\\])*+"', re.S),
    "`": re.compile(r"`(?:``|[^`])*+`"),
}


def _closing_quote(code: str, start: int) -> int:
    """Index of the quote closing the literal that opens at `start`, or -1."""
    literal = _LITERALS[code[start]].match(code, start)
    return literal.end() - 1 if literal else -1
