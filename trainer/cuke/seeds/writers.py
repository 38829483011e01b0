"""How a problem (the PyTorch reference module) is written: one of a few personas, each a consistent way people
write their own modules, with its details drawn per pair from a seeded RNG. A persona decides the op spellings
(`F.*`, `torch.*`, tensor methods, `nn` layers, formulas), where the sizes live (module constants, inside
`get_inputs`, constructor defaults), names, docstrings, type hints, imports and how the forward is laid out. The
persona is the pair's `style` tag, which the held-out split can keep out of training. What the prose says (where the
module is used, what its input holds, its author's notes) and the names of the main input and of the sizes come from
one setting drawn per file (`scenarios.py`), so a file tells one consistent story."""

from __future__ import annotations

import ast
import random
import re
import textwrap
from dataclasses import dataclass, field

from .ops import OPS_BY_TAG
from .scenarios import FEATURE_ROLES, HEADER_LINES, Scenario, ScenarioWords, draw_scenario, role_of
from .vocab import (ARG_DESCRIPTIONS, ATTRIBUTES, COMMENT_LINES, CONSTANT_SPELLINGS, CTOR_DESCRIPTIONS,
                    DOC_OPENERS, EXAMPLE_INTROS, HEADER_COMMENTS, INIT_COMMENTS, INIT_INPUTS_COMMENTS, INPUT_NAMES,
                    LINE_COMMENTS, MAIN_GUARDS, PURPOSES, REFERENCES, RETURNS_DESCRIPTIONS, SHAPE_LETTERS,
                    SIZE_COMMENTS, STEP_NAMES)

# persona: (spelling preference, size placement weights module/inline/locals, constructor defaults share,
#           docstring weights none/line/long/args, hint weights none/forward/full, classic super share)
PERSONAS = {
    "functional": (["F", "torch", "method", "expr"], (6, 1, 1), 0.1, (1, 4, 4, 1), (6, 1, 0), 0.1),
    "torch_namespace": (["torch", "F", "method", "expr"], (1, 4, 3), 0.1, (3, 3, 3, 0), (5, 2, 0), 0.15),
    "tensor_methods": (["method", "torch", "F", "expr"], (3, 2, 2), 0.2, (1, 3, 4, 1), (2, 4, 1), 0.1),
    "nn_layers": (["nn", "F", "torch", "method"], (4, 1, 1), 0.3, (1, 2, 5, 2), (4, 2, 1), 0.3),
    "configurable": (["F", "nn", "method", "torch"], (2, 1, 1), 0.9, (0, 1, 3, 5), (1, 2, 4), 0.1),
    "annotated": (["torch", "F", "nn", "method"], (4, 0, 1), 0.4, (0, 0, 1, 5), (0, 1, 6), 0.0),
    "formula": (["expr", "method", "torch", "F"], (2, 2, 3), 0.2, (2, 3, 3, 1), (4, 2, 0), 0.4),
}
# Weights of the personas in the library (annotated is the rarest, a natural held-out style).
PERSONA_WEIGHTS = {"functional": 5, "torch_namespace": 4, "tensor_methods": 4, "nn_layers": 4, "configurable": 3,
                   "annotated": 2, "formula": 3}

# Main (non-pointwise) ops: spellings over {0}, {1}, ... and keyword parameters. "nn" entries are parameter-free
# layer constructors called on {0}.
MAIN_SPELLINGS: dict[str, list[tuple[str, str]]] = {
    "softmax": [("F", "F.softmax({0}, dim={dim})"), ("torch", "torch.softmax({0}, dim={dim})"),
                ("method", "{0}.softmax(dim={dim})"), ("nn", "nn.Softmax(dim={dim})")],
    "log_softmax": [("F", "F.log_softmax({0}, dim={dim})"), ("torch", "torch.log_softmax({0}, dim={dim})"),
                    ("method", "{0}.log_softmax(dim={dim})"), ("nn", "nn.LogSoftmax(dim={dim})")],
    "sum": [("torch", "torch.sum({0}, dim={dim}{keep})"), ("method", "{0}.sum(dim={dim}{keep})"),
            ("method", "{0}.sum({dim}{keep})")],
    "mean": [("torch", "torch.mean({0}, dim={dim}{keep})"), ("method", "{0}.mean(dim={dim}{keep})"),
             ("method", "{0}.mean({dim}{keep})")],
    "amax": [("torch", "torch.amax({0}, dim={dim}{keep})"), ("method", "{0}.amax(dim={dim}{keep})"),
             ("method", "{0}.max(dim={dim}{keep}).values"), ("torch", "torch.max({0}, dim={dim}{keep})[0]")],
    "amin": [("torch", "torch.amin({0}, dim={dim}{keep})"), ("method", "{0}.amin(dim={dim}{keep})"),
             ("method", "{0}.min(dim={dim}{keep}).values")],
    "argmax": [("torch", "torch.argmax({0}, dim={dim}{keep})"), ("method", "{0}.argmax(dim={dim}{keep})")],
    "argmin": [("torch", "torch.argmin({0}, dim={dim}{keep})"), ("method", "{0}.argmin(dim={dim}{keep})")],
    "vector_norm": [("torch", "torch.linalg.vector_norm({0}, dim={dim}{keep})"),
                    ("method", "{0}.norm(dim={dim}{keep})"), ("torch", "torch.norm({0}, dim={dim}{keep})")],
    "logsumexp": [("torch", "torch.logsumexp({0}, dim={dim}{keep})"), ("method", "{0}.logsumexp(dim={dim}{keep})")],
    "var": [("torch", "torch.var({0}, dim={dim}{keep})"), ("method", "{0}.var(dim={dim}{keep})")],
    "std": [("torch", "torch.std({0}, dim={dim}{keep})"), ("method", "{0}.std(dim={dim}{keep})")],
    "var_biased": [("torch", "torch.var({0}, dim={dim}, unbiased=False{keep})"),
                   ("method", "{0}.var(dim={dim}, correction=0{keep})")],
    "prod": [("torch", "torch.prod({0}, dim={dim}{keep})"), ("method", "{0}.prod(dim={dim}{keep})")],
    "cumsum": [("torch", "torch.cumsum({0}, dim={dim})"), ("method", "{0}.cumsum(dim={dim})"),
               ("method", "{0}.cumsum({dim})")],
    "cumprod": [("torch", "torch.cumprod({0}, dim={dim})"), ("method", "{0}.cumprod(dim={dim})")],
    "add": [("expr", "{0} + {1}"), ("torch", "torch.add({0}, {1})"), ("method", "{0}.add({1})")],
    "sub": [("expr", "{0} - {1}"), ("torch", "torch.sub({0}, {1})"), ("method", "{0}.sub({1})")],
    "mul": [("expr", "{0} * {1}"), ("torch", "torch.mul({0}, {1})"), ("method", "{0}.mul({1})")],
    "div": [("expr", "{0} / {1}"), ("torch", "torch.div({0}, {1})"), ("method", "{0}.div({1})"),
            ("torch", "torch.true_divide({0}, {1})")],
    "maximum": [("torch", "torch.maximum({0}, {1})"), ("method", "{0}.maximum({1})"), ("torch", "torch.max({0}, {1})")],
    "minimum": [("torch", "torch.minimum({0}, {1})"), ("method", "{0}.minimum({1})"), ("torch", "torch.min({0}, {1})")],
    "matmul": [("torch", "torch.matmul({0}, {1})"), ("expr", "{0} @ {1}"), ("method", "{0}.matmul({1})")],
    "mm": [("torch", "torch.mm({0}, {1})"), ("torch", "torch.matmul({0}, {1})"), ("expr", "{0} @ {1}"),
           ("method", "{0}.mm({1})")],
    "bmm": [("torch", "torch.bmm({0}, {1})"), ("expr", "{0} @ {1}"), ("method", "{0}.bmm({1})"),
            ("torch", "torch.matmul({0}, {1})")],
    "linear": [("F", "F.linear({0}, {1})"), ("expr", "{0} @ {1}.t()"), ("torch", "torch.matmul({0}, {1}.T)")],
    "linear_bias": [("F", "F.linear({0}, {1}, {2})"), ("expr", "{0} @ {1}.t() + {2}"),
                    ("torch", "torch.matmul({0}, {1}.t()) + {2}")],  # not addmm: inputs may be 3-D
    "transpose": [("method", "{0}.transpose({d0}, {d1})"), ("torch", "torch.transpose({0}, {d0}, {d1})")],
    "max_pool2d": [("F", "F.max_pool2d({0}, kernel_size={k}, stride={s}, padding={p})"),
                   ("F", "F.max_pool2d({0}, {k}, {s}, {p})"),
                   ("nn", "nn.MaxPool2d(kernel_size={k}, stride={s}, padding={p})")],
    "avg_pool2d": [("F", "F.avg_pool2d({0}, kernel_size={k}, stride={s}, padding={p})"),
                   ("F", "F.avg_pool2d({0}, {k}, {s}, {p})"),
                   ("nn", "nn.AvgPool2d(kernel_size={k}, stride={s}, padding={p})")],
    "max_pool1d": [("F", "F.max_pool1d({0}, kernel_size={k}, stride={s}, padding={p})"),
                   ("nn", "nn.MaxPool1d({k}, stride={s}, padding={p})")],
    "avg_pool1d": [("F", "F.avg_pool1d({0}, kernel_size={k}, stride={s}, padding={p})"),
                   ("nn", "nn.AvgPool1d({k}, stride={s}, padding={p})")],
    "global_avg_pool": [("torch", "torch.mean({0}, dim=(2, 3))"), ("method", "{0}.mean(dim=(-2, -1))"),
                        ("F", "F.adaptive_avg_pool2d({0}, 1).flatten(1)"), ("method", "{0}.mean([2, 3])")],
    "masked_fill": [("method", "{0}.masked_fill({1}, {v})"), ("torch", "torch.masked_fill({0}, {1}, {v})"),
                    ("torch", "torch.where({1}, torch.full_like({0}, {v}), {0})")],
    "gather": [("torch", "torch.gather({0}, {d}, {1})"), ("method", "{0}.gather({d}, {1})")],
    "index_select": [("torch", "torch.index_select({0}, 0, {1})"), ("method", "{0}.index_select(0, {1})"),
                     ("expr", "{0}[{1}]")],
    "embedding": [("F", "F.embedding({0}, {1})"), ("expr", "{1}[{0}]"), ("method", "{1}.index_select(0, {0}.reshape(-1)).reshape(*{0}.shape, -1)")],
    "lerp": [("torch", "torch.lerp({0}, {1}, {w})"), ("method", "{0}.lerp({1}, {w})"), ("expr", "{0} + {w} * ({1} - {0})")],
    "scaled_add": [("torch", "torch.add({0}, {1}, alpha={w})"), ("expr", "{0} + {w} * {1}"),
                   ("method", "{0}.add({1}, alpha={w})")],
    "hypot": [("torch", "torch.hypot({0}, {1})"), ("method", "{0}.hypot({1})")],
    "atan2": [("torch", "torch.atan2({0}, {1})"), ("method", "{0}.atan2({1})")],
    "fmod": [("torch", "torch.fmod({0}, {1})"), ("method", "{0}.fmod({1})")],
    "remainder": [("torch", "torch.remainder({0}, {1})"), ("expr", "{0} % {1}"), ("method", "{0}.remainder({1})")],
    "copysign": [("torch", "torch.copysign({0}, {1})"), ("method", "{0}.copysign({1})")],
    "where": [("torch", "torch.where({0}, {1}, {2})"), ("method", "{1}.where({0}, {2})")],
    "tril_mask": [("torch", "torch.tril({0}, diagonal={k})"), ("method", "{0}.tril({k})")],
    "triu_mask": [("torch", "torch.triu({0}, diagonal={k})"), ("method", "{0}.triu({k})")],
}

_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)


@dataclass
class ProblemWriter:
    """The writing choices of one problem file (and the matching names in its ModelNew)."""

    style: str
    prefs: list[str]
    sizes: str  # module | inline | locals
    constant_case: str  # lower | upper | alias
    ctor_defaults: bool
    doc: str  # none | line | long | args
    hints: str  # none | forward | full
    classic_super: bool
    doc_format: str  # google | numpy | sphinx: how docstring sections are laid out
    short_exponents: bool  # float literals written 1e-5 (not Python's repr, 1e-05)
    summary_first: bool  # a multi-line docstring starts on the line of its quotes
    imports: str  # alias | from | functional_from | full_path (torch.nn.functional.* spelled out)
    layout: str  # reassign | nested | fresh
    dtype_form: str  # kw | method | to
    size_form: str  # args | tuple
    module_doc: bool
    comment_sizes: bool
    comment_constants: bool  # a trailing comment on module-level size constants
    header_comment: bool
    main_guard: bool
    line_comments: float  # chance of a comment on a forward line
    scenario: Scenario  # the setting the file's prose, input names and (scenario_sizes) size names come from
    scenario_sizes: bool
    helper: bool  # a pure forward goes into a module-level function that forward calls
    rng: random.Random = field(repr=False, default_factory=random.Random)
    story: ScenarioWords | None = None  # the scenario's words this file uses (drawn once, at rendering)
    names: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, str] | None = None
    layers: list[tuple[str, str]] = field(default_factory=list)  # (attribute, nn constructor), parameter-free

    # ------------------------------------------------ op spellings

    def choose(self, options: list[tuple[str, str]]) -> tuple[str, str]:
        """One spelling: mostly the persona's favourite kind available, sometimes another."""
        kinds = {k for k, _ in options}
        order = [k for k in self.prefs if k in kinds] + sorted(kinds - set(self.prefs))
        if self.rng.random() < 0.75:
            kind = order[0]
        else:
            kind = self.rng.choice(order)
        return kind, self.rng.choice([t for k, t in options if k == kind])

    def resolve(self, text: str) -> str:
        """Replace every «key¦args¦:k=v» placeholder by a spelling (innermost first), parenthesised when it is not
        atomic and sits inside a larger expression."""
        pattern = re.compile(r"«([^«»]*)»")
        while True:
            match = pattern.search(text)
            if match is None:
                return text
            value = self._spell(match.group(1))
            head = text[:match.start()].rstrip(" ")
            tail = text[match.end():].lstrip(" ")
            bare = (not head or head[-1] in "=(,[¦\n") and (not tail or tail[0] in ")],¦»\n")
            if not bare and not _is_atomic(value):
                value = f"({value})"
            text = text[:match.start()] + value + text[match.end():]

    def _spell(self, inner: str) -> str:
        key, *parts = inner.split("¦")
        args = [p for p in parts if not p.startswith(":")]
        kwargs = dict(p[1:].split("=", 1) for p in parts if p.startswith(":"))
        if key in OPS_BY_TAG:
            op = OPS_BY_TAG[key]
            options = list(op.spellings) + ([("nn", op.layer)] if op.layer else [])
            kind, template = self.choose(options)
            if kind == "nn":
                return f"{self._layer(op.name, template)}({args[0]})"
            return _fill(template.replace("{x}", "{0}"), args, {})
        options = MAIN_SPELLINGS[key]
        kind, template = self.choose(options)
        if kind == "nn":
            return f"{self._layer(key, template.format(**kwargs))}({args[0]})"
        return _fill(template, args, kwargs)

    def _layer(self, name: str, constructor: str) -> str:
        for attr, existing in self.layers:
            if existing == constructor:
                return f"self.{attr}"
        base = self.rng.choice([name, name, "act", f"{name}_layer", f"{name}_fn"]) if name != "softmax" else name
        attr = base
        taken = {a for a, _ in self.layers}
        k = 2
        while attr in taken:
            attr, k = f"{base}{k}", k + 1
        self.layers.append((attr, constructor))
        return f"self.{attr}"

    # ------------------------------------------------ names

    def name_map(self, spec, forward: str = "") -> dict[str, str]:
        """Canonical forward/constructor parameter names -> this file's names (computed once per pair), avoiding
        every name of the constructor and of the forward as laid out (`forward`)."""
        if self.names:
            return self.names
        used = set(_python_names(spec.forward_body)) | set(_python_names(spec.init_body)) | set(_python_names(forward))
        used |= set(spec.forward_params) | set(spec.init_params) | {"self", "torch", "nn", "F", "math"}
        mapping: dict[str, str] = {}
        for p in spec.forward_params:
            pool = list(INPUT_NAMES.get(p, [p]))
            self.rng.shuffle(pool)
            if p == "x" and role_of(spec.family) in FEATURE_ROLES and self.rng.random() < 0.5:
                pool = self.rng.sample(self.scenario.names, len(self.scenario.names)) + pool  # named after the data
            if self.rng.random() < 0.35:
                pool.insert(0, p)
            mapping[p] = next((n for n in pool if n == p or (n not in used and n not in mapping.values())), p)
        for p in spec.init_params:
            pool = list(CONSTANT_SPELLINGS.get(p, [p]))
            self.rng.shuffle(pool)
            if self.rng.random() < 0.5:
                pool.insert(0, p)
            mapping[p] = next((n for n in pool if n == p or (n not in used and n not in mapping.values())), p)
        self.names = mapping
        return mapping

    def attribute_map(self, spec) -> dict[str, str]:
        """Parameter / buffer / setting attributes (`self.weight`, ...) -> this author's names (chosen once)."""
        if self.attributes is not None:
            return self.attributes
        code = spec.init_body + "\n" + spec.forward_body
        existing = set(re.findall(r"\bself\.(\w+)", code)) | set(re.findall(r'register_buffer\("(\w+)"', code))
        mapping: dict[str, str] = {}
        for attr in sorted(existing):
            if attr in ATTRIBUTES and self.rng.random() < 0.5:
                alias = self.rng.choice(ATTRIBUTES[attr])
                if alias not in existing and alias not in mapping.values():
                    mapping[attr] = alias
        self.attributes = mapping
        return mapping

    def rename(self, code: str, spec) -> str:
        """Code of the problem (or of ModelNew) with this file's variable and attribute names."""
        code = rename_python(code, self.name_map(spec))
        for attr, alias in self.attribute_map(spec).items():
            code = re.sub(rf"\bself\.{attr}\b", f"self.{alias}", code)
            code = code.replace(f'register_buffer("{attr}"', f'register_buffer("{alias}"')
        return code

    def constant_names(self, constants: dict, taken: set[str]) -> dict[str, str]:
        out = {}
        for name in constants:
            base = (self.story.size_name(name) if self.scenario_sizes else None) or name
            if self.constant_case == "upper":
                new = base.upper()
            elif self.constant_case == "alias" and base == name:
                new = self.rng.choice(CONSTANT_SPELLINGS.get(name, [name]))
            else:
                new = base
            if new in taken or new in out.values() or not new.isidentifier():
                new = name
            out[name] = new
        return out


def draw_writer(rng: random.Random, style: str | None = None) -> ProblemWriter:
    r = random.Random(rng.random())
    style = style or r.choices(list(PERSONA_WEIGHTS), list(PERSONA_WEIGHTS.values()))[0]
    prefs, size_w, ctor, doc_w, hint_w, classic = PERSONAS[style]
    return ProblemWriter(
        style=style, prefs=prefs, sizes=r.choices(["module", "inline", "locals"], size_w)[0],
        constant_case=r.choices(["lower", "upper", "alias"], [4, 2, 2])[0], ctor_defaults=r.random() < ctor,
        doc=r.choices(["none", "line", "long", "args"], doc_w)[0],
        hints=r.choices(["none", "forward", "full"], hint_w)[0], classic_super=r.random() < classic,
        doc_format=r.choices(["google", "numpy", "sphinx"], [6, 2, 2])[0], short_exponents=r.random() < 0.5,
        summary_first=r.random() < 0.4,
        imports=r.choice(["alias", "alias", "from", "functional_from", "full_path"]),
        layout=r.choices(["reassign", "nested", "fresh"], [4, 2, 3])[0],
        dtype_form=r.choices(["kw", "method", "to"], [4, 2, 1])[0], size_form=r.choices(["args", "tuple"], [5, 1])[0],
        module_doc=r.random() < 0.45, comment_sizes=r.random() < 0.3, comment_constants=r.random() < 0.35,
        header_comment=r.random() < 0.4,
        main_guard=r.random() < 0.15,
        line_comments={"annotated": 0.45, "configurable": 0.35, "formula": 0.4}.get(style, 0.2) * r.random() * 2,
        scenario=draw_scenario(r), scenario_sizes=r.random() < 0.4,
        helper=r.random() < {"functional": 0.35, "formula": 0.4, "annotated": 0.3}.get(style, 0.2), rng=r)


def _fill(template: str, args: list[str], kwargs: dict) -> str:
    """Format a spelling: keyword parameters first, then the operands, parenthesised where the template needs it."""
    template = re.sub(r"\{([A-Za-z_]\w*)\}", lambda m: kwargs[m.group(1)], template)

    def operand(match: re.Match) -> str:
        value = args[int(match.group(1))]
        head = template[:match.start()].rstrip()
        before = head[-1:] if head else "("
        after = template[match.end():].lstrip()[:1] or ")"
        bare_ok = before in "(," and after in ",)"
        return value if bare_ok or _is_atomic(value) else f"({value})"
    return re.sub(r"\{(\d+)\}", operand, template)


def _is_atomic(expr: str) -> bool:
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, _ATOMIC) or (isinstance(node, ast.Constant) and not str(node.value).startswith("-"))


_PY_TOKEN = re.compile(r"(\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|#[^\n]*)|([A-Za-z_]\w*)|([()\[\]{}])|(==|!=|<=|>=)|(=)|(\.)|(\S)",
                       re.S)


def _python_names(code: str) -> list[str]:
    return [m.group(2) for m in _PY_TOKEN.finditer(code) if m.group(2)]


def rename_python(code: str, mapping: dict[str, str]) -> str:
    """Rename variables in Python source: not inside strings or comments, not attribute names (`self.x`), not
    keyword-argument names (`dim=` inside a call)."""
    if not mapping:
        return code
    out, pos, depth, previous = [], 0, 0, ""
    tokens = list(_PY_TOKEN.finditer(code))
    for index, m in enumerate(tokens):
        out.append(code[pos:m.start()])
        pos = m.end()
        text = m.group(0)
        if m.group(3):
            depth += 1 if text in "([{" else -1
        if m.group(2) and text in mapping and previous != ".":
            following = tokens[index + 1].group(0) if index + 1 < len(tokens) else ""
            if not (depth > 0 and following == "=" and tokens[index + 1].group(5)):
                text = mapping[text]
        out.append(text)
        previous = m.group(0)
    out.append(code[pos:])
    return "".join(out)


# ---------------------------------------------------------------- forward layouts

def layout_forward(body: str, writer: ProblemWriter) -> str:
    """Reassign one variable (`x = f(x)` ...), nest the steps into one expression, or give each step a new name.
    Only straight-line runs of `v = ...` steps on the same variable are rewritten."""
    lines = body.split("\n")
    if writer.layout == "reassign" or len(lines) < 2:
        return body
    runs = _linear_runs(lines)
    if not runs:
        return body
    out = list(lines)
    for start, end, var in reversed(runs):
        steps = [out[i].split(" = ", 1)[1] for i in range(start, end)]
        if writer.layout == "nested" and len(steps) <= 3 and sum(len(s) for s in steps) < 110:
            expr = steps[0]
            for step in steps[1:]:
                expr = _substitute(step, var, expr)
            out[start:end] = [f"{var} = {expr}"]
        elif writer.layout == "fresh":
            taken = set(_python_names(body))
            pool = [n for n in ("h", "y", "out", "z", "act", "tmp", "result", "hidden", "t", "u", "val", "res")
                    if n not in taken]
            writer.rng.shuffle(pool)
            names = [var]
            for step in steps:
                named = _step_name(step, writer) if writer.rng.random() < 0.6 else None
                fresh = [n for n in ([named] if named else []) + pool if n not in taken and n not in names]
                if not fresh:
                    break
                names.append(fresh[0])
            if len(names) < end - start + 1:
                continue
            new = []
            for k, step in enumerate(steps):
                new.append(f"{names[k + 1]} = {_substitute(step, var, names[k])}")
            out[start:end] = new
            # later uses of `var` read the last step's name
            tail = "\n".join(out[start + len(new):])
            tail = rename_python(tail, {var: names[len(steps)]})
            out = out[:start + len(new)] + tail.split("\n")
    return "\n".join(out)


def _step_name(step: str, writer: ProblemWriter) -> str | None:
    """A name for the result of a forward step after what it computes ("probs" for a softmax), if one fits."""
    key = next((k for k in STEP_NAMES if k in step), None)
    return writer.rng.choice(STEP_NAMES[key]) if key else None


def _linear_runs(lines: list[str]) -> list[tuple[int, int, str]]:
    runs, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\w+) = (.+)$", lines[i])
        if not m or "«" not in lines[i] and m.group(1) not in _python_names(m.group(2)):
            i += 1
            continue
        var, j = m.group(1), i
        while j < len(lines):
            mj = re.match(rf"^{var} = (.+)$", lines[j])
            if not mj or var not in _python_names(mj.group(1)) or "," in mj.group(1).split("«")[0]:
                break
            j += 1
        if j - i >= 2:
            runs.append((i, j, var))
        i = max(j, i + 1)
    return runs


def _substitute(expr: str, var: str, value: str) -> str:
    """`expr` with the variable `var` replaced by `value` (in parentheses unless it is atomic)."""
    return rename_python(expr, {var: value if _is_atomic(value) else f"({value})"})


# ---------------------------------------------------------------- the problem file

def render_problem(spec, writer: ProblemWriter) -> str:
    """The problem module: imports, optional size constants, an optional helper function, Model, get_inputs(),
    get_init_inputs()."""
    writer.story = writer.story or ScenarioWords(writer.scenario, role_of(spec.family), writer.rng)
    forward = layout_forward(writer.resolve(spec.forward_body), writer)
    if writer.imports == "full_path":
        forward = re.sub(r"\bF\.", "torch.nn.functional.", forward)
    names = writer.name_map(spec, forward)
    forward = _comment_lines(writer.rename(forward, spec), writer)
    if writer.rng.random() < 0.2 and writer.story.role:
        forward = f"# {writer.story.imperative()}\n{forward}"
    elif writer.rng.random() < 0.25 and (shape := _shape_comment(spec, names, writer)):
        forward = f"{shape}\n{forward}"
    helper, forward = _helper_function(spec, writer, forward, [names.get(p, p) for p in spec.forward_params])
    init_body = _comment_lines(writer.rename(spec.init_body, spec), writer, INIT_COMMENTS)
    constants = dict(spec.constants)
    const_names = writer.constant_names(constants, set(names.values()) | set(_python_names(forward)))
    init_values = [_evaluate(expr, constants) for expr in spec.init_inputs]
    use_defaults = _use_defaults(writer, init_values)
    layers = [f"self.{attr} = {ctor}" for attr, ctor in writer.layers]
    full_init = "\n".join(filter(None, [init_body] + layers))
    parts: list[str] = []
    story = writer.story
    if writer.header_comment:
        header = writer.rng.choice(HEADER_COMMENTS) if writer.rng.random() < 0.5 else writer.rng.choice(HEADER_LINES)
        parts.append(story.fill(header) + "\n")
        if writer.rng.random() < 0.3:
            parts.append(story.follow_up() + "\n")
    if writer.module_doc:
        first = _sentence(spec.doc)
        if story.role and writer.rng.random() < 0.4:
            first = story.line_doc(spec.doc.rstrip("."))
        sentences = [first, _purpose(story)] + ([story.note()] if writer.rng.random() < 0.5 else [])
        parts.append(_docstring(sentences, 0) + "\n\n")
    parts.append(_imports(writer, forward + "\n" + helper + "\n" + full_init + "\n" + "\n".join(spec.inputs)))
    inputs = [_dtype_form(_size_form(e, writer), writer) for e in spec.inputs]
    init_exprs = list(spec.init_inputs)
    if writer.sizes == "module" and constants:
        parts.append("\n")
        if writer.comment_sizes:
            parts.append(writer.rng.choice(COMMENT_LINES) + "\n")
        for name, value in constants.items():
            parts.append(f"{const_names[name]} = {value!r}{_size_comment(name, writer)}\n")
        inputs = [rename_python(e, const_names) for e in inputs]
        init_exprs = [rename_python(e, const_names) for e in init_exprs]
    if helper:
        parts += ["\n\n", helper]
    parts += ["\n\n", "class Model(nn.Module):\n", _class_doc(spec, writer, init_values)]
    init_sig, _, forward_sig = model_signatures(spec, writer)
    parts.append(f"    def {init_sig}:\n")
    parts.append("        super(Model, self).__init__()\n" if writer.classic_super else "        super().__init__()\n")
    if full_init.strip():
        parts.append(_indent(full_init, 8) + "\n")
    parts.append(f"\n    def {forward_sig}:\n")
    if writer.doc == "args":
        parts.append(_forward_doc(spec, [names.get(p, p) for p in spec.forward_params], writer))
    comment = story.input_comment(sizes) if (sizes := _story_sizes(spec)) and writer.rng.random() < 0.3 else None
    params = [names.get(p, p) for p in spec.forward_params]
    parts += [_indent(forward, 8) + "\n", "\n\n", _get_inputs(inputs, constants, const_names, writer, comment, params),
              "\n\n"]
    if use_defaults:
        parts.append(_function("get_init_inputs", ["return []"], writer, "list"))
    else:
        parts.append(_get_init_inputs(init_exprs, constants, const_names, writer))
    if writer.rng.random() < 0.2:  # a comment on what the constructor gets
        parts[-1] = parts[-1].rstrip("\n") + "  " + writer.rng.choice(
            INIT_INPUTS_COMMENTS["empty" if parts[-1].endswith("return []\n") else "args"]) + "\n"
    if writer.main_guard:
        parts.append("\n\n" + "\n".join(writer.rng.choice(MAIN_GUARDS)) + "\n")
    text = "".join(parts)
    return re.sub(r"(\d)e-0(\d)", r"\1e-\2", text) if writer.short_exponents else text  # 1e-5 rather than 1e-05


def _size_comment(constant: str, writer: ProblemWriter) -> str:
    """"  # ..." after a module-level size constant, for writers who say what their sizes are."""
    if not writer.comment_constants:
        return ""
    comment = writer.story.size_comment(constant)
    if comment is None and constant in SIZE_COMMENTS:
        comment = writer.rng.choice(SIZE_COMMENTS[constant])
    return f"  {comment}" if comment and writer.rng.random() < 0.8 else ""


def _use_defaults(writer: ProblemWriter, init_values: list) -> bool:
    return bool(writer.ctor_defaults and init_values and all(v is not _UNKNOWN for v in init_values))


def model_signatures(spec, writer: ProblemWriter) -> tuple[str, str, str]:
    """(`__init__(...)`, constructor body, `forward(...)`) that ModelNew shares with the problem's Model."""
    names = writer.name_map(spec)
    init_values = [_evaluate(expr, spec.constants) for expr in spec.init_inputs]
    init_params = [names.get(p, p) for p in spec.init_params]
    fwd_params = [names.get(p, p) for p in spec.forward_params]
    return (_init_signature(init_params, init_values, writer, _use_defaults(writer, init_values)),
            writer.rename(spec.init_body, spec), _forward_signature(fwd_params, spec, writer, "torch.Tensor"))


_UNKNOWN = object()


def _evaluate(expr: str, constants: dict):
    try:
        return eval(expr, {"__builtins__": {}}, dict(constants))  # our own literal/size expressions only
    except Exception:
        return _UNKNOWN


def _init_signature(params: list[str], values: list, writer: ProblemWriter, defaults: bool) -> str:
    """`__init__(...)` with the constructor parameters (annotated, with defaults when the style says so)."""
    items = ["self"]
    for p, v in zip(params, values):
        hint = ""
        if writer.hints == "full" and v is not _UNKNOWN and isinstance(v, (int, float)) and not isinstance(v, bool):
            hint = f": {type(v).__name__}"
        if defaults:
            items.append(f"{p}{hint} = {v!r}" if hint else f"{p}={v!r}")
        else:
            items.append(f"{p}{hint}")
    items += params[len(values):]
    ret = " -> None" if writer.hints == "full" else ""
    return f"__init__({', '.join(items)}){ret}"


def _forward_signature(params: list[str], spec, writer: ProblemWriter, tensor: str) -> str:
    """`forward(...)` with its annotations, as it follows `def `."""
    if writer.hints == "none":
        return f"forward({', '.join(['self'] + params)})"
    outputs = getattr(spec, "outputs", 1)
    ret = tensor if outputs == 1 else f"tuple[{', '.join([tensor] * outputs)}]"
    return f"forward({', '.join(['self'] + [f'{p}: {tensor}' for p in params])}) -> {ret}"


def _imports(writer: ProblemWriter, code: str) -> str:
    lines = []
    if "math." in code:
        lines.append("import math\n")
    lines.append("import torch\n")
    if writer.imports in ("alias", "full_path"):
        lines.append("import torch.nn as nn\n")
        if "F." in code:
            lines.append("import torch.nn.functional as F\n")
    elif writer.imports == "from":
        lines.append("from torch import nn\n")
        if "F." in code:
            lines.append("import torch.nn.functional as F\n")
    else:
        lines.append("import torch.nn as nn\n")
        if "F." in code:
            lines.append("from torch.nn import functional as F\n")
    return "".join(lines)


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _purpose(story: ScenarioWords) -> str:
    """Where the module is used, in one sentence of the file's setting."""
    r = story.rng
    if r.random() < 0.5:
        return story.setting()
    return story.fill(r.choice(PURPOSES), ctx=f"a {story.words['model']} for {story.words['field']}")


def _story(spec, writer: ProblemWriter) -> list[str]:
    """The sentences after a docstring's first line: where the module is used, now and then what the input holds
    in the setting's words and a note of its author."""
    story, r = writer.story, writer.rng
    sentences = [_purpose(story)]
    sizes = _story_sizes(spec)
    if sizes and r.random() < 0.5:
        sentences.append(story.shape(sizes))
    if r.random() < 0.65:
        sentences.append(story.note())
    return sentences


def _shape_comment(spec, names: dict, writer: ProblemWriter) -> str | None:
    """"# x: (B, T, D)": the first input's shape in the letters (or words) its author uses for sizes."""
    dims = [d.strip() for d in (_input_shapes(spec) or [""])[0].split(",") if d.strip()]
    if not dims or not spec.forward_params:
        return None
    letters = [writer.rng.choice(SHAPE_LETTERS.get(d, [d])) for d in dims]
    if len(set(letters)) < len(letters):
        letters = dims
    return f"# {names.get(spec.forward_params[0], spec.forward_params[0])}: ({', '.join(letters)})"


# Size names of an input the setting's words can describe: (batch, features) or (batch, sequence, features).
_BATCH_SIZES, _SEQUENCE_SIZES, _FEATURE_SIZES = {"batch_size", "rows", "batch"}, {"seq_len", "length", "num_tokens"}, \
    {"dim", "cols", "hidden_dim"}


def _story_sizes(spec) -> list[int] | None:
    """The sizes of the first input when it is a (batch, [sequence,] features) tensor of a feature-like op."""
    if role_of(spec.family) not in FEATURE_ROLES or not spec.inputs:
        return None
    dims = [d.strip() for d in _input_shapes(spec)[0].split(",") if d.strip()]
    if len(dims) not in (2, 3) or dims[0] not in _BATCH_SIZES or dims[-1] not in _FEATURE_SIZES:
        return None
    if len(dims) == 3 and dims[1] not in _SEQUENCE_SIZES:
        return None
    sizes = [spec.constants.get(d) for d in dims]
    return sizes if all(isinstance(v, int) and v > 1 for v in sizes) else None


def _docstring(sentences: list[str], indent: int) -> str:
    """A docstring: the first sentence on its own line, the others as one paragraph wrapped to the line length."""
    pad = " " * indent
    first, rest = sentences[0], " ".join(sentences[1:])
    if not rest:
        return f'{pad}"""{first}"""'
    body = textwrap.fill(rest, width=116 - indent, initial_indent=pad, subsequent_indent=pad)
    return f'{pad}"""{first}\n\n{body}\n{pad}"""'


def _class_doc(spec, writer: ProblemWriter, init_values: list) -> str:
    """The class docstring: a sentence (line), or with where it is used, a reference, the constructor arguments,
    the input shapes and an example (long / args)."""
    if writer.doc == "none":
        return ""
    r = writer.rng
    desc = spec.doc.rstrip(".")
    first = _sentence(r.choice(DOC_OPENERS).format(desc=desc, Desc=desc[:1].upper() + desc[1:]))
    if writer.doc == "line":
        if writer.story.role and r.random() < 0.5:
            first = writer.story.line_doc(desc)
        return f'    """{first}"""\n\n'
    lines = [first, ""] + textwrap.wrap(" ".join(_story(spec, writer)), width=108)
    refs = REFERENCES.get(getattr(spec, "family", ""), [])
    if refs and r.random() < 0.6:
        lines.append(f"{r.choice(['Reference', 'See', 'Follows', 'After'])}: {r.choice(refs)}.")
    names = writer.names
    if writer.doc == "args" and spec.init_params:
        kinds = [type(v).__name__ if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
                 for v in init_values] + [""] * len(spec.init_params)
        entries = [(names.get(p, p), kind, f"{CTOR_DESCRIPTIONS.get(p, 'constructor argument')}.")
                   for p, kind in zip(spec.init_params, kinds)]
        lines += [""] + _doc_section("args", entries, writer)
    shapes = _input_shapes(spec)
    if shapes and r.random() < 0.6:
        lines += [""] + _doc_section("shape", [(names.get(p, p), "", f"({s})")
                                               for p, s in zip(spec.forward_params, shapes) if s], writer)
    if writer.doc == "args" and r.random() < 0.5 and all(v is not _UNKNOWN for v in init_values):
        args = ", ".join(repr(v) for v in init_values)
        intro = r.choice(EXAMPLE_INTROS) if writer.doc_format != "numpy" else "Examples\n--------"
        lines += ["", *intro.split("\n"), f"    >>> model = Model({args})", "    >>> out = model(*get_inputs())"]
    body = "\n".join(("    " + line) if line else "" for line in lines)
    if writer.summary_first:  # the summary on the line of the opening quotes (PEP 257), not below them
        return f'    """{body[4:]}\n    """\n\n'
    return f'    """\n{body}\n    """\n\n'


# Section headings of the docstring formats: Google, NumPy, Sphinx field lists (None: a Google-style section).
_SECTIONS = {"args": ("Args:", "Parameters", ":param"), "returns": ("Returns:", "Returns", ":returns:"),
             "shape": ("Shape:", "Shapes", None)}


def _doc_section(section: str, entries: list[tuple[str, str, str]], writer: ProblemWriter) -> list[str]:
    """The lines of a docstring section (its (name, type, text) entries) in the writer's docstring format."""
    google, numpy, sphinx = _SECTIONS[section]
    if section == "shape" and writer.doc_format == "google":
        google = writer.rng.choice(["Shape:", "Shapes:", "Inputs:"])
    if writer.doc_format == "numpy":
        lines = [numpy, "-" * len(numpy)]
        for name, kind, text in entries:
            lines += [f"{name} : {kind}".strip(" :") if name else kind, f"    {text}"]
        return lines
    if writer.doc_format == "sphinx" and sphinx:
        if section == "returns":
            return [f"{sphinx} {text}" for _, _, text in entries]
        return [f"{sphinx} {name}: {text}" for name, _, text in entries]
    lines = [google]
    for name, _, text in entries:
        lines.append(f"    {name}: {text}" if name else f"    {text}")
    return lines


def _helper_function(spec, writer: ProblemWriter, forward: str, params: list[str]) -> tuple[str, str]:
    """(helper source, forward) for writers that put a forward using no module state into a function of its own;
    ("", forward) otherwise."""
    if not writer.helper or not params or re.search(r"\bself\b", forward):
        return "", forward
    taken = set(_python_names(forward)) | set(params) | {"torch", "nn", "F", "math", "Model", "get_inputs",
                                                         "get_init_inputs"}
    name = writer.story.helper_name() or f"{spec.family}_reference"
    if writer.rng.random() < 0.3:
        name = f"_{name}"
    if name in taken:
        return "", forward
    signature = _forward_signature(params, spec, writer, "torch.Tensor").replace("forward(self, ", f"{name}(", 1)
    doc = ""
    if writer.rng.random() < 0.4:
        doc = f'    """{_sentence(writer.story.words["action"])}"""\n'
    return f"def {signature}:\n{doc}{_indent(forward, 4)}\n", f"return {name}({', '.join(params)})"


def _input_shapes(spec) -> list[str]:
    """The size names of each input, from its get_inputs() expression (empty when it has no plain shape)."""
    out = []
    for expr in spec.inputs:
        match = re.search(r"torch\.(?:randn|rand|randint)\((?:[^,()]+,\s*[^,()]+,\s*)?\(?([\w, ]+?)\)?(?:,|\))", expr) \
            if "randint" in expr else re.search(r"torch\.(?:randn|rand)\(\(?([\w, ]+?)\)?(?:, dtype=[\w.]+)?\)", expr)
        out.append(match.group(1).strip().rstrip(",") if match else "")
    return out


def _comment_lines(body: str, writer: ProblemWriter, comments: dict[str, list[str]] = LINE_COMMENTS) -> str:
    """Now and then a comment above a line (of the forward, or the constructor), about what the line does."""
    if writer.line_comments <= 0:
        return body
    out = []
    for line in body.split("\n"):
        if line.strip() and not line.lstrip().startswith("#") and writer.rng.random() < writer.line_comments:
            hits = [key for key in comments if key in line]
            if hits:
                comment = writer.rng.choice(comments[writer.rng.choice(hits)])
                indent = line[:len(line) - len(line.lstrip())]
                if writer.rng.random() < 0.5 and len(line) < 70:
                    line = f"{line}  {comment}"
                else:
                    out.append(indent + comment)
        out.append(line)
    return "\n".join(out)


def _forward_doc(spec, params: list[str], writer: ProblemWriter) -> str:
    r = writer.rng
    entries = []
    for canonical, name in zip(spec.forward_params, params):
        what = r.choice(ARG_DESCRIPTIONS.get(canonical, ARG_DESCRIPTIONS["default"]))
        if canonical == "x" and writer.story.role and r.random() < 0.5:
            what = writer.story.argument()
        entries.append((name, "torch.Tensor", f"{what}."))
    lines = _doc_section("args", entries, writer) + [""]
    lines += _doc_section("returns", [("", "torch.Tensor", f"{r.choice(RETURNS_DESCRIPTIONS)}.")], writer)
    body = "\n".join(("        " + line) if line else "" for line in lines)
    return f'        """{_sentence(spec.doc)}\n\n{body}\n        """\n'


def _size_form(expr: str, writer: ProblemWriter) -> str:
    if writer.size_form == "tuple":
        return re.sub(r"torch\.(randn|rand)\(([^()]*?)(, dtype=[\w.]+)?\)",
                      lambda m: f"torch.{m.group(1)}(({m.group(2)}){m.group(3) or ''})" if "," in m.group(2)
                      else m.group(0), expr)
    return expr


def _dtype_form(expr: str, writer: ProblemWriter) -> str:
    if writer.dtype_form == "kw":
        return expr
    methods = {"torch.float16": ".half()", "torch.bfloat16": ".bfloat16()", "torch.float64": ".double()"}

    def convert(m: re.Match) -> str:
        call, dtype = m.group(1), m.group(2)
        if writer.dtype_form == "method" and dtype in methods:
            return f"{call}){methods[dtype]}"
        return f"{call}).to({dtype})"
    return re.sub(r"(torch\.(?:randn|rand)\((?:[^()]|\([^()]*\))*?), dtype=(torch\.\w+)\)", convert, expr)


def _function(name: str, body: list[str], writer: ProblemWriter, ret: str) -> str:
    hint = f" -> {ret}" if writer.hints == "full" else ""
    return f"def {name}(){hint}:\n" + "".join(f"    {line}\n" for line in body)


def _used_constants(exprs: list[str], constants: dict) -> list[str]:
    used = set()
    for e in exprs:
        used |= set(_python_names(e))
    return [c for c in constants if c in used]


def _get_inputs(inputs: list[str], constants: dict, const_names: dict, writer: ProblemWriter,
                comment: str | None, params: list[str]) -> str:
    """get_inputs(), with `comment` (what the inputs stand for) above its first line when given; inputs bound to
    local names are now and then named like the forward's parameters."""
    body = [comment] if comment else []
    if writer.rng.random() < 0.15:
        body.insert(0, f'"""{writer.story.inputs_doc()}"""')
    if writer.sizes == "inline":
        literal = {k: repr(v) for k, v in constants.items()}
        inputs = [rename_python(e, literal) for e in inputs]
        if len(inputs) > 1 or writer.rng.random() < 0.5:
            return _function("get_inputs", body + [f"return [{', '.join(inputs)}]"], writer, "list")
    if writer.sizes == "locals":
        used = _used_constants(inputs, constants)
        local = {c: const_names[c].lower() for c in used}
        body += [f"{local[c]} = {constants[c]!r}{_size_comment(c, writer)}" for c in used]
        inputs = [rename_python(e, local) for e in inputs]
    if writer.rng.random() < 0.4 and len(inputs) <= 3:
        taken = {n for e in inputs for n in _python_names(e)} | {line.split(" = ")[0] for line in body
                                                                 if not line.startswith("#")}
        names = [n for n in ("x", "y", "z", "inp", "a", "b", "t0", "t1", "t2") if n not in taken][:len(inputs)]
        if len(params) == len(inputs) and not taken & set(params) and writer.rng.random() < 0.5:
            names = params
        body += [f"{n} = {e}" for n, e in zip(names, inputs)] + [f"return [{', '.join(names)}]"]
    else:
        body.append(f"return [{', '.join(inputs)}]")
    return _function("get_inputs", body, writer, "list")


def _get_init_inputs(exprs: list[str], constants: dict, const_names: dict, writer: ProblemWriter) -> str:
    if writer.sizes == "inline":
        literal = {k: repr(v) for k, v in constants.items()}
        return _function("get_init_inputs", [f"return [{', '.join(rename_python(e, literal) for e in exprs)}]"],
                         writer, "list")
    if writer.sizes == "locals":
        used = _used_constants(exprs, constants)
        local = {c: const_names[c].lower() for c in used}
        body = [f"{local[c]} = {constants[c]!r}" for c in used]
        body.append(f"return [{', '.join(rename_python(e, local) for e in exprs)}]")
        return _function("get_init_inputs", body, writer, "list")
    return _function("get_init_inputs", [f"return [{', '.join(exprs)}]"], writer, "list")


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * spaces)
