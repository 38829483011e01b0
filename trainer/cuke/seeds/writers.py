"""How a problem (the PyTorch reference module) is written: one of a few personas, each a consistent way people
write their own modules, with its details drawn per pair from a seeded RNG. A persona decides the op spellings
(`F.*`, `torch.*`, tensor methods, `nn` layers, formulas), where the sizes live (module constants, inside
`get_inputs`, constructor defaults), names, docstrings, type hints, imports and how the forward is laid out. The
persona is the pair's `style` tag, which the held-out split can keep out of training."""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field

from .ops import OPS_BY_TAG
from .vocab import (ARG_DESCRIPTIONS, ATTRIBUTES, COMMENT_LINES, COMPONENTS, CONSTANT_SPELLINGS, CONTEXTS,
                    CTOR_DESCRIPTIONS, DATASETS, DOC_OPENERS, DOMAINS, EXAMPLE_INTROS, HEADER_COMMENTS, INPUT_NAMES,
                    LINE_COMMENTS, MAIN_GUARDS, MODEL_KINDS, PURPOSES, REFERENCES, RETURNS_DESCRIPTIONS)

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
                    ("torch", "torch.addmm({2}, {0}, {1}.t())")],
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
    imports: str  # alias | from | functional_from
    layout: str  # reassign | nested | fresh
    dtype_form: str  # kw | method | to
    size_form: str  # args | tuple
    module_doc: bool
    comment_sizes: bool
    header_comment: bool
    main_guard: bool
    line_comments: float  # chance of a comment on a forward line
    rng: random.Random = field(repr=False, default_factory=random.Random)
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
            if self.constant_case == "upper":
                new = name.upper()
            elif self.constant_case == "alias":
                new = self.rng.choice(CONSTANT_SPELLINGS.get(name, [name]))
            else:
                new = name
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
        imports=r.choice(["alias", "alias", "from", "functional_from"]),
        layout=r.choices(["reassign", "nested", "fresh"], [4, 2, 3])[0],
        dtype_form=r.choices(["kw", "method", "to"], [4, 2, 1])[0], size_form=r.choices(["args", "tuple"], [5, 1])[0],
        module_doc=r.random() < 0.3, comment_sizes=r.random() < 0.3, header_comment=r.random() < 0.3,
        main_guard=r.random() < 0.15,
        line_comments={"annotated": 0.35, "configurable": 0.25, "formula": 0.3}.get(style, 0.12) * r.random() * 2,
        rng=r)


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
            names = [var] + pool[:end - start]
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
    """The problem module: imports, optional size constants, Model, get_inputs(), get_init_inputs()."""
    forward = layout_forward(writer.resolve(spec.forward_body), writer)
    names = writer.name_map(spec, forward)
    forward = _comment_lines(writer.rename(forward, spec), writer)
    init_body = writer.rename(spec.init_body, spec)
    constants = dict(spec.constants)
    const_names = writer.constant_names(constants, set(names.values()) | set(_python_names(forward)))
    init_values = [_evaluate(expr, constants) for expr in spec.init_inputs]
    use_defaults = _use_defaults(writer, init_values)
    layers = [f"self.{attr} = {ctor}" for attr, ctor in writer.layers]
    full_init = "\n".join(filter(None, [init_body] + layers))
    parts: list[str] = []
    if writer.header_comment:
        r = writer.rng
        domain = r.choice(DOMAINS)
        parts.append(r.choice(HEADER_COMMENTS).format(comp=r.choice(COMPONENTS), kind=r.choice(MODEL_KINDS),
                                                      domain=domain, Domain=domain[:1].upper() + domain[1:],
                                                      data=r.choice(DATASETS)) + "\n")
    if writer.module_doc:
        parts.append(f'"""{_sentence(spec.doc)} {_purpose(writer.rng)}"""\n\n')
    parts.append(_imports(writer, forward + "\n" + full_init + "\n" + "\n".join(spec.inputs)))
    inputs = [_dtype_form(_size_form(e, writer), writer) for e in spec.inputs]
    init_exprs = list(spec.init_inputs)
    if writer.sizes == "module" and constants:
        parts.append("\n")
        if writer.comment_sizes:
            parts.append(writer.rng.choice(COMMENT_LINES) + "\n")
        for name, value in constants.items():
            parts.append(f"{const_names[name]} = {value!r}\n")
        inputs = [rename_python(e, const_names) for e in inputs]
        init_exprs = [rename_python(e, const_names) for e in init_exprs]
    parts += ["\n\n", "class Model(nn.Module):\n", _class_doc(spec, writer, init_values)]
    init_sig, _, forward_sig = model_signatures(spec, writer)
    parts.append(f"    def {init_sig}:\n")
    parts.append("        super(Model, self).__init__()\n" if writer.classic_super else "        super().__init__()\n")
    if full_init.strip():
        parts.append(_indent(full_init, 8) + "\n")
    parts.append(f"\n    def {forward_sig}:\n")
    if writer.doc == "args":
        parts.append(_forward_doc(spec, [names.get(p, p) for p in spec.forward_params], writer))
    parts += [_indent(forward, 8) + "\n", "\n\n", _get_inputs(inputs, constants, const_names, writer), "\n\n"]
    if use_defaults:
        parts.append(_function("get_init_inputs", ["return []"], writer, "list"))
    else:
        parts.append(_get_init_inputs(init_exprs, constants, const_names, writer))
    if writer.main_guard:
        parts.append("\n\n" + "\n".join(writer.rng.choice(MAIN_GUARDS)) + "\n")
    return "".join(parts)


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
    if writer.imports == "alias":
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


def _purpose(r: random.Random) -> str:
    return r.choice(PURPOSES).format(ctx=r.choice(CONTEXTS), comp=r.choice(COMPONENTS), kind=r.choice(MODEL_KINDS),
                                     domain=r.choice(DOMAINS), data=r.choice(DATASETS))


def _class_doc(spec, writer: ProblemWriter, init_values: list) -> str:
    """The class docstring: a sentence (line), or with where it is used, a reference, the constructor arguments,
    the input shapes and an example (long / args)."""
    if writer.doc == "none":
        return ""
    r = writer.rng
    desc = spec.doc.rstrip(".")
    first = _sentence(r.choice(DOC_OPENERS).format(desc=desc, Desc=desc[:1].upper() + desc[1:]))
    if writer.doc == "line":
        return f'    """{first}"""\n\n'
    lines = [first, "", _purpose(r)]
    refs = REFERENCES.get(getattr(spec, "family", ""), [])
    if refs and r.random() < 0.6:
        lines.append(f"{r.choice(['Reference', 'See', 'Follows', 'After'])}: {r.choice(refs)}.")
    names = writer.names
    if writer.doc == "args" and spec.init_params:
        lines += ["", "Args:"]
        for p in spec.init_params:
            lines.append(f"    {names.get(p, p)}: {CTOR_DESCRIPTIONS.get(p, 'constructor argument')}.")
    shapes = _input_shapes(spec)
    if shapes and r.random() < 0.6:
        lines += ["", r.choice(["Shape:", "Shapes:", "Inputs:"])]
        lines += [f"    {names.get(p, p)}: ({s})" for p, s in zip(spec.forward_params, shapes) if s]
    if writer.doc == "args" and r.random() < 0.5 and all(v is not _UNKNOWN for v in init_values):
        args = ", ".join(repr(v) for v in init_values)
        lines += ["", r.choice(EXAMPLE_INTROS), f"    >>> model = Model({args})", "    >>> out = model(*get_inputs())"]
    body = "\n".join(("    " + line) if line else "" for line in lines)
    return f'    """\n{body}\n    """\n\n'


def _input_shapes(spec) -> list[str]:
    """The size names of each input, from its get_inputs() expression (empty when it has no plain shape)."""
    out = []
    for expr in spec.inputs:
        match = re.search(r"torch\.(?:randn|rand|randint)\((?:[^,()]+,\s*[^,()]+,\s*)?\(?([\w, ]+?)\)?(?:,|\))", expr) \
            if "randint" in expr else re.search(r"torch\.(?:randn|rand)\(\(?([\w, ]+?)\)?(?:, dtype=[\w.]+)?\)", expr)
        out.append(match.group(1).strip().rstrip(",") if match else "")
    return out


def _comment_lines(body: str, writer: ProblemWriter) -> str:
    """Now and then a comment above a forward line, about what the line does."""
    if writer.line_comments <= 0:
        return body
    out = []
    for line in body.split("\n"):
        if line.strip() and not line.lstrip().startswith("#") and writer.rng.random() < writer.line_comments:
            hits = [key for key in LINE_COMMENTS if key in line]
            if hits:
                comment = writer.rng.choice(LINE_COMMENTS[writer.rng.choice(hits)])
                indent = line[:len(line) - len(line.lstrip())]
                if writer.rng.random() < 0.5 and len(line) < 70:
                    line = f"{line}  {comment}"
                else:
                    out.append(indent + comment)
        out.append(line)
    return "\n".join(out)


def _forward_doc(spec, params: list[str], writer: ProblemWriter) -> str:
    r = writer.rng
    lines = ["Args:"]
    for canonical, name in zip(spec.forward_params, params):
        what = r.choice(ARG_DESCRIPTIONS.get(canonical, ARG_DESCRIPTIONS["default"]))
        lines.append(f"    {name}: {what}.")
    lines += ["", "Returns:", f"    {r.choice(RETURNS_DESCRIPTIONS)}."]
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


def _get_inputs(inputs: list[str], constants: dict, const_names: dict, writer: ProblemWriter) -> str:
    if writer.sizes == "inline":
        literal = {k: repr(v) for k, v in constants.items()}
        inputs = [rename_python(e, literal) for e in inputs]
        if len(inputs) > 1 or writer.rng.random() < 0.5:
            return _function("get_inputs", [f"return [{', '.join(inputs)}]"], writer, "list")
    body = []
    if writer.sizes == "locals":
        used = _used_constants(inputs, constants)
        local = {c: const_names[c].lower() for c in used}
        body += [f"{local[c]} = {constants[c]!r}" for c in used]
        inputs = [rename_python(e, local) for e in inputs]
    if writer.rng.random() < 0.4 and len(inputs) <= 3:
        taken = {n for e in inputs for n in _python_names(e)} | {line.split(" = ")[0] for line in body}
        names = [n for n in ("x", "y", "z", "inp", "a", "b", "t0", "t1", "t2") if n not in taken][:len(inputs)]
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
    import textwrap
    return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * spaces)
