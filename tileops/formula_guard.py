"""The §4.2 guard: FLOPs and bytes are computed in the manifest tooling and nowhere else.

Hard-coded formulas are a CI failure: a benchmark, report or exporter that
computes FLOPs or bytes itself would disagree with the manifest the first time
one of them changes, and nobody would notice. Every consumer reads
``op.eval_roofline()`` (or a record that carries its result).

This module scans Python *source files* (it never looks at a formula string)
and reports each place where a cost-named target (``flops``, ``bytes``,
``nbytes``, ``total_flops``, ``read_bytes``, ``work``, ``macs``, a ``*_flops``
function's return, a ``flops=`` keyword, a ``"bytes"`` dict key) receives

* a tensor-size source: ``.numel()``, ``.nelement()``, ``.element_size()``,
  ``.nbytes``, ``.itemsize``, ``finfo(...).bits``, or ``prod(... .shape ...)``
  (rule ``size-source``); or
* multiplicative arithmetic over sizes: a product with at least two
  non-constant factors, or a non-constant factor and a constant of 2 or more,
  e.g. ``2 * m * n * k`` (rule ``formula-arithmetic``);

and each place where a rate-named target (``tflops``, ``gbps``, ``bandwidth``,
``throughput``, ``bytes_per_s``) is a division whose numerator does either:
``tflops = 2*M*N*K/t`` and ``gbps = (a.numel()+b.numel())*a.element_size()/t``
compute the op's cost on the way to its rate.

Reading a priced number is fine: ``flops, nbytes = op.eval_roofline()``,
``rate = rec.bytes / seconds``, ``tflops = rec.flops / t / 1e12``,
``total = sum(r.flops for r in rows)``. Names that describe a device or a
buffer rather than an op (``peak_flops``, ``theoretical_gbps``,
``l2_cache_bytes``, ``flush_buffer_bytes``) are neither.

A line may carry a waiver, ``# formula-guard: allow <reason>`` (the reason is
required); modules that legitimately count are listed in ``ALLOWED`` with why.
``scan(paths)`` returns the findings; ``python -m tileops.formula_guard``
scans the repository's code and exits 1 on any.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable, Mapping

#: Paths (relative to the repository root, POSIX; a trailing "/" is a directory) that count by design.
ALLOWED: dict[str, str] = {
    "tileops/manifest/": "the manifest tooling: analysis and codegen, which derive bytes from the signature",
    "tileops/ops/primitives.py": "the primitive set the formulas call (bytes(t), bits(t), prod)",
    "tileops/ops/formulas.py": "func-mode formulas, the one place Python states a formula (§2.2)",
    "tileops/ops/_roofline_gen.py": "generated evaluators: copies of checked manifest formulas (§4.4.1)",
    "tileops/ops/base.py": "the call model: records each tensor's size, which bytes(t) reads",
    "tileops/ops/call.py": "the call model: serves bytes(t) to the formulas",
    "tileops/calibrate/": "calibration microbenchmarks count their own kernels' traffic and FLOPs (STREAM rules, "
                          "the primer's peak arithmetic); they measure a device, they price no op",
    "tileops/formula_guard.py": "this guard (its patterns name the cost words)",
    "benchmarks/roofline_pricing.py": "synthesises records to time the roofline tool; its numbers price no op",
    "benchmarks/exposition.py": "synthesises records to time the metrics exposition; its numbers price no op",
    "benchmarks/serve_scrape.py": "synthesises records to time serve's scrapes; its numbers price no op",
    "benchmarks/calibrate_triad.py": "compares the calibration's own kernels with STREAM, a D2D copy and torch.mm: "
                                     "it counts those kernels' traffic and FLOPs, as tileops/calibrate/ does",
    "tests/test_oracle.py": "the structural oracle (§4.6): an auditor that must recount bytes independently "
                            "of the manifest, from the tensors each workload binds",
}

#: The default scope: the package, the benchmark scripts, the helper scripts and the tests.
DEFAULT_SCOPE = ("tileops", "benchmarks", "scripts", "tests")

WAIVER = re.compile(r"#\s*formula-guard:\s*allow\b\s*\S")
_COST_WORDS = {"flops", "flop", "bytes", "nbytes", "flop_count", "bytes_moved", "traffic", "work", "macs", "mac"}
#: words that make a name a rate of some cost (judged on the numerator of its division)
_RATE_WORDS = {"tflops", "gflops", "pflops", "tflop", "gflop", "gbps", "tbps", "mbps", "gibps", "bandwidth",
               "bw", "throughput", "per", "rate", "intensity"}
#: words that make a name about the machine or a buffer rather than an op's cost
_DEVICE_WORDS = {"peak", "roof", "ceiling", "theoretical", "calibrated", "nominal", "spec", "size", "cache", "l2",
                 "llc", "buffer", "flush", "capacity", "mem", "memory", "free", "used", "reserved", "allocated",
                 "page", "file", "disk", "dir"}
_SIZE_METHODS = {"numel", "nelement", "element_size"}
_SIZE_ATTRS = {"nbytes", "itemsize"}
_PROD_FUNCS = {"prod", "product"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int
    rule: str  # size-source | formula-arithmetic
    target: str
    message: str

    def render(self) -> str:
        return (f"{self.path}:{self.line}:{self.col + 1}: [{self.rule}] {self.message}\n"
                "    fix: read (flops, bytes) from op.eval_roofline() (or a record); state a formula in the "
                "manifest or tileops.ops.formulas, or waive the line with '# formula-guard: allow <reason>'")


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[_\W]+", name.lower()) if w}


def is_rate_name(name: str) -> bool:
    """tflops, gbps, achieved_bandwidth, bytes_per_s: yes. peak_tflops, theoretical_gbps: no."""
    words = _words(name)
    return bool(words & _RATE_WORDS) and not words & _DEVICE_WORDS


def is_cost_name(name: str) -> bool:
    """flops, nbytes, total_flops, read_bytes, bytes_moved, work: yes. peak_flops, bytes_per_s: no."""
    words = _words(name)
    return bool(words & _COST_WORDS) and not words & _DEVICE_WORDS and not is_rate_name(name)


def numerators(value: ast.AST) -> list[ast.AST]:
    """The dividends of a division (``a / t / 1e12`` -> ``a``); empty when ``value`` divides nothing."""
    out: list[ast.AST] = []
    node = value
    while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
        node = node.left
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv))):
            out.append(node)
    return out


def _target_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Subscript):
        s = node.slice
        if isinstance(s, ast.Constant) and isinstance(s.value, str):
            return [s.value]
        return []
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _target_names(e)]
    if isinstance(node, ast.Starred):
        return _target_names(node.value)
    return []


def _mentions_shape(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == "shape")
               or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "size")
               for n in ast.walk(node))


def size_source(value: ast.AST) -> str | None:
    """The first tensor-size source inside ``value``, described; None when there is none."""
    for n in ast.walk(value):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _SIZE_METHODS:
            return f".{n.func.attr}()"
        if isinstance(n, ast.Attribute) and n.attr in _SIZE_ATTRS:
            return f".{n.attr}"
        if isinstance(n, ast.Attribute) and n.attr == "bits" and isinstance(n.value, ast.Call):
            return ".bits of a dtype"
        if isinstance(n, ast.Call):
            fn = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if fn in _PROD_FUNCS and any(_mentions_shape(a) for a in n.args):
                return f"{fn}() of a shape"
    return None


def _factors(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Pow)):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _const(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const(node.operand)
        return None if v is None else -v
    return None


def formula_arithmetic(value: ast.AST) -> str | None:
    """A product of sizes inside ``value``: two non-constant factors, or one and a constant >= 2."""
    for n in ast.walk(value):
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Pow)):
            fs = _factors(n)
            consts = [c for c in (_const(f) for f in fs) if c is not None]
            variables = len(fs) - len(consts)
            if variables >= 2 or (variables >= 1 and any(abs(c) >= 2 for c in consts)):
                return ast.unparse(n)
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str]) -> None:
        self.path = path
        self.lines = lines
        self.findings: list[Finding] = []
        self.functions: list[str] = []
        self.statements: list[ast.stmt] = []  # the statements enclosing the node being visited

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt):
            self.statements.append(node)
            try:
                super().visit(node)
            finally:
                self.statements.pop()
        else:
            super().visit(node)

    def _has_waiver(self, first: int, last: int) -> bool:
        return any(WAIVER.search(self.lines[i - 1]) for i in range(first, last + 1) if 0 < i <= len(self.lines))

    def waived(self, node: ast.stmt | ast.expr) -> bool:
        """A waiver on the flagged expression's lines, on its statement's, or on a comment line just above
        that statement (a simple statement's lines; a compound statement's header line)."""
        first, last = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
        if self._has_waiver(first, last):
            return True
        if not self.statements:
            return False
        stmt = self.statements[-1]
        compound = any(isinstance(getattr(stmt, f, None), list) and getattr(stmt, f) and
                       isinstance(getattr(stmt, f)[0], ast.stmt) for f in ("body", "orelse", "handlers"))
        s_first = stmt.lineno
        s_last = stmt.lineno if compound else (stmt.end_lineno or stmt.lineno)
        above = s_first - 1
        comment_above = 0 < above <= len(self.lines) and self.lines[above - 1].lstrip().startswith("#")
        return self._has_waiver(s_first, s_last) or (comment_above and self._has_waiver(above, above))

    def judge(self, stmt: ast.stmt | ast.expr, targets: list[str], value: ast.AST | None) -> None:
        if value is None:
            return
        cost = [t for t in targets if is_cost_name(t)]
        rate = [t for t in targets if is_rate_name(t)]
        if cost:
            self.judge_value(stmt, cost[0], value, "")
        elif rate:
            for num in numerators(value):
                if self.judge_value(stmt, rate[0], num, "'s numerator"):
                    break

    def judge_value(self, stmt: ast.stmt | ast.expr, target: str, value: ast.AST, what: str) -> bool:
        """Record a finding when ``value`` computes a cost; True when it did."""
        src = size_source(value)
        arith = None if src is not None else formula_arithmetic(value)
        if (src is None and arith is None) or self.waived(stmt):
            return False
        if src is not None:
            self.findings.append(Finding(self.path, stmt.lineno, stmt.col_offset, "size-source", target,
                                         f"{target}{what} is computed from a tensor size ({src})"))
        else:
            self.findings.append(Finding(self.path, stmt.lineno, stmt.col_offset, "formula-arithmetic", target,
                                         f"{target}{what} is computed by a formula ({arith})"))
        return True

    def visit_Assign(self, node: ast.Assign) -> None:
        self.judge(node, [n for t in node.targets for n in _target_names(t)], node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.judge(node, _target_names(node.target), node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.judge(node, _target_names(node.target), node.value)
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Return(self, node: ast.Return) -> None:
        if self.functions:
            self.judge(node, [self.functions[-1]], node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for kw in node.keywords:
            if kw.arg is not None:
                self.judge(kw.value if hasattr(kw.value, "lineno") else node, [kw.arg], kw.value)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                self.judge(v, [k.value], v)
        self.generic_visit(node)


def scan_source(source: str, path: str = "<string>") -> list[Finding]:
    """Findings in one module's source. A file that does not parse is one finding, not a crash."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, (exc.offset or 1) - 1, "syntax", "", f"does not parse: {exc.msg}")]
    s = _Scanner(path, source.splitlines())
    s.visit(tree)
    return sorted(s.findings, key=lambda f: (f.line, f.col))


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _is_python(p: Path) -> bool:
    if p.suffix == ".py":
        return True
    if p.suffix or not p.is_file():
        return False
    try:
        with p.open("rb") as fh:
            first = fh.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _relative(p: Path, root: Path) -> str:
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def allowed_reason(rel: str, allowed: Mapping[str, str]) -> str | None:
    for prefix, why in allowed.items():
        if rel == prefix or (prefix.endswith("/") and rel.startswith(prefix)):
            return why
    return None


def python_files(paths: Iterable[Path | str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.is_file() and _is_python(f)
                              and "__pycache__" not in f.parts))
        elif p.exists():
            out.append(p)
    return out


def scan(paths: Iterable[Path | str] | None = None, *, root: Path | None = None,
         allowed: Mapping[str, str] | None = None) -> list[Finding]:
    """Findings in every Python file under ``paths`` (default: the repository's code).

    ``allowed`` maps path prefixes relative to ``root`` to the reason they may count
    (default ``ALLOWED``); pass ``{}`` to scan everything.
    """
    root = root or repo_root()
    allowed = ALLOWED if allowed is None else allowed
    if paths is None:
        paths = [root / d for d in DEFAULT_SCOPE if (root / d).exists()]
    findings: list[Finding] = []
    for f in python_files(paths):
        rel = _relative(f, root)
        if allowed_reason(rel, allowed) is not None:
            continue
        findings.extend(scan_source(f.read_text(encoding="utf-8", errors="replace"), rel))
    return findings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    findings = scan(args or None)
    for f in findings:
        print(f.render())
    print(f"{len(findings)} finding(s)" if findings
          else "formula guard: no FLOP or byte arithmetic outside the manifest",
          file=sys.stderr if findings else sys.stdout)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
