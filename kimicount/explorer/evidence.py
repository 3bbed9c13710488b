"""Code evidence: the lines of the modeling file and of config.json behind each part of the model.

Evidence is located by the files' structure, never by line numbers written down here. The modeling
file (modeling_deepseek.py, as the config's `auto_map` names it) is parsed with Python's `ast`:

- a component's *definition* is the statement in its class's `__init__` (or a method `__init__`
  calls, as `_init_rope`) that assigns `self.<attr>`, the whole statement however many lines it takes;
- its *uses* are the statements of the class's other methods (the forward pass) that read `self.<attr>`
  (for an `if`, `for` or `with`, only the header that reads it);
- an activation's *definition* is each assignment in `forward` that binds the variable (`compressed_kv`
  is bound twice: the projection, then the split that leaves the 512-wide latent);
- a class's evidence is its definition, with the module-level statements right after it that name it
  (`ALL_LAYERNORM_LAYERS.append(DeepseekV3RMSNorm)`); a page shows a long class by its head and a short
  `forward` (`class_passage`), the passages that use it, not the whole class.

Which class holds a module path (`model.layers.5.self_attn.kv_b_proj`) is read off the file too:
starting from the model class, each attribute's `__init__` assignment says what it holds
(`DeepseekV3Model(config)`, `nn.ModuleList([DeepseekV3DecoderLayer(…) …])`, a dict of classes indexed
by the attention implementation, a conditional between `DeepseekV3MoE` and `DeepseekV3MLP`). A
condition the config decides is decided with its values and the constructors' arguments
(`layer_idx >= config.first_k_dense_replace`); where the attribute may still hold several classes,
the one that has the next attribute is taken, and of a class and its subclass, the class.

config.json evidence is the line range of a top-level key, found by scanning the JSON's tokens (a
nested object such as quantization_config: from its key to its closing brace).

What disagrees with what the tree expects (an attribute that is not there, a Linear whose size
works out differently) is collected as a finding, to be shown, never hidden.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from kimicount.errors import MAX_COUNT, ConfigError, KimicountError
from kimicount.explorer.evidence_kda import chosen_assignment, config_call, config_property
from kimicount.reading import parse_json, shorten

if TYPE_CHECKING:
    from kimicount.anatomy import Node

DEFINITION, USE, CONFIG = "definition", "use", "config"

#: Python's own line breaks (the tokenizer's: \r\n, \r, \n), which are also JSON's; str.splitlines
#: would split at form feeds and other characters the tokenizer does not count as line ends.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

#: The attention's projections and norms, as modeling_deepseek.py's DeepseekV3Attention.__init__ names
#: them, in file order (the pages' "Latent attention" lists them; its "projections" passage runs from the
#: first to rotary_emb).
ATTENTION_PROJECTIONS = (
    "q_a_proj",
    "q_a_layernorm",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_a_layernorm",
    "kv_b_proj",
    "o_proj",
)

#: A class of at most this many lines is shown whole; a longer one by its head and a short forward.
CLASS_LINES = 60

#: Module containers: what they hold is what their first argument builds.
_CONTAINERS = ("ModuleList", "ModuleDict", "Sequential")


class ModelingError(KimicountError):
    """The modeling file cannot be used: unreadable, too large, not Python, or not named by the config."""


@dataclass(frozen=True)
class Evidence:
    """Lines of a file that define or use a part of the model: the JSON contract of `show --json`."""

    file: str  # "modeling_deepseek.py" or "config.json"
    revision: str | None  # the commit the file came from, when known
    start: int  # 1-based, inclusive
    end: int
    role: str  # "definition" | "use" | "config"
    excerpt: str  # those lines, verbatim ("" when the file is not here: lines from the pinned index)
    link: str | None = None  # the lines at that revision on the Hub, when the revision is known

    @property
    def lines(self) -> str:
        """'676–681', or '852' for one line."""
        return f"{self.start}" if self.start == self.end else f"{self.start}–{self.end}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "revision": self.revision,
            "start": self.start,
            "end": self.end,
            "role": self.role,
            "excerpt": self.excerpt,
            "link": self.link,
        }


@dataclass(frozen=True)
class Step:
    """One attribute on the way down a module path: `owner.__init__` sets `self.attr`, which holds an
    instance of one of `holds` (classes of the modeling file) or else of `external` ('nn.Linear')."""

    owner: str
    attr: str
    holds: tuple[str, ...]
    external: str | None
    #: The owner's constructor arguments as far as the config decides them (layer_idx=5,
    #: intermediate_size=2048), for working out its sizes.
    bindings: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


#: The uses of one attribute a page cites: modeling_deepseek.py's most used, `self.config`, has a
#: handful; a file whose forward reads one in thousands of statements would make a page of them.
MAX_USES = 20


class ModelingIndex:
    """The classes of one modeling file, parsed once, and the evidence found in it."""

    def __init__(
        self,
        tree: ast.Module,
        lines: list[str],
        *,
        file: str,
        revision: str | None,
        root: str | None,
        config: Mapping[str, Any] | None = None,
    ):
        self.file = file
        self.config: Mapping[str, Any] = config or {}
        self.revision = revision
        self._lines = lines
        self._module = tree.body
        self.classes: dict[str, ast.ClassDef] = {
            node.name: node for node in tree.body if isinstance(node, ast.ClassDef)
        }
        self._globals: dict[str, ast.expr] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self._globals[target.id] = node.value
        if root is None:  # the causal LM class, as `auto_map`'s AutoModelForCausalLM names it
            root = next((name for name in self.classes if name.endswith("ForCausalLM")), None)
        self.root = root
        self._findings: list[str] = []
        #: _definitions' answers: the file is read once, and each page asks again
        self._assignments: dict[tuple[str, str], list[ast.stmt]] = {}
        #: _forward_uses' answers, by class
        self._uses: dict[str, dict[str, list[tuple[int, int]]]] = {}

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        file: str,
        revision: str | None = None,
        root: str | None = None,
        config: Mapping[str, Any] | None = None,
        where: str | None = None,
    ) -> ModelingIndex:
        """The index of the modeling file's text; `root` is the model class module paths start from
        (default: the class whose name ends in ForCausalLM); `config` (config.json's values) decides
        what the file leaves to it: whether layer 0's `mlp` is the MoE or the dense MLP, an expert's
        width. Not Python: a ModelingError naming the file (`where`: its path; default `file`) and the
        line."""
        where = where or file
        try:
            tree = ast.parse(text, filename=file)
        except SyntaxError as error:
            line = f" at line {error.lineno}" if error.lineno else ""
            raise ModelingError(f"{where}: not valid Python: {error.msg}{line}") from None
        except (ValueError, RecursionError, MemoryError) as error:  # null bytes; nesting too deep
            reason = "nested too deeply" if isinstance(error, RecursionError | MemoryError) else str(error)
            raise ModelingError(f"{where}: not valid Python: {shorten(reason)}") from None
        if root is not None and root not in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}:
            raise ModelingError(f"{where}: no class {shorten(root, 100)} (the config's auto_map names it)")
        return cls(tree, _LINE_BREAK.split(text), file=file, revision=revision, root=root, config=config)

    # --- evidence --------------------------------------------------------------------------------

    def lines(self, start: int, end: int, role: str) -> Evidence:
        """Evidence of lines start…end (1-based, inclusive) of this file."""
        excerpt = "\n".join(self._lines[start - 1 : end])
        return Evidence(self.file, self.revision, start, end, role, excerpt)

    def span(self, first: Evidence, last: Evidence, role: str | None = None) -> Evidence:
        """One piece of evidence from `first`'s first line to `last`'s last: a passage of the forward
        pass named by the statements it starts and ends with (the prefill attention: from `cos, sin =`
        to the first `attn_output =`)."""
        return self.lines(min(first.start, last.start), max(first.end, last.end), role or first.role)

    def class_(self, cls_name: str) -> list[Evidence]:
        """The class's definition (from its first decorator), with the module-level statements right
        after it that name it (`ALL_LAYERNORM_LAYERS.append(DeepseekV3RMSNorm)`)."""
        node = self.classes.get(cls_name)
        if node is None:
            self._note(f"no class {cls_name}")
            return []
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        end = node.end_lineno or node.lineno
        after = self._module[self._module.index(node) + 1 :]
        for statement in after:
            if isinstance(statement, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                break
            if not any(isinstance(n, ast.Name) and n.id == cls_name for n in ast.walk(statement)):
                break
            end = statement.end_lineno or statement.lineno
        return [self.lines(start, end, DEFINITION)]

    def class_passage(self, cls_name: str) -> list[Evidence]:
        """What a page shows of a class: the whole class when it is short (CLASS_LINES or fewer: an
        RMSNorm, the MLP); a longer one by its head (decorators, the class line, its docstring) and its
        `forward` when that is short too (the MoE's, 11 lines), not its hundreds of lines (the
        attention's 230: its pages cite the passages of its forward instead)."""
        node = self.classes.get(cls_name)
        if node is None:
            return self.class_(cls_name)  # the finding
        whole = self.class_(cls_name)
        if whole[0].end - whole[0].start + 1 <= CLASS_LINES:
            return whole
        first = node.body[0]
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        head_end = _end(first) if docstring else node.lineno
        found = [self.lines(whole[0].start, head_end, DEFINITION)]
        forward = _own_method(node, "forward")
        if forward is not None and _end(forward) - forward.lineno + 1 <= CLASS_LINES:
            start = min([forward.lineno, *(d.lineno for d in forward.decorator_list)])
            found.append(self.lines(start, _end(forward), USE))
        return found

    def attribute(self, cls_name: str, attr: str) -> list[Evidence]:
        """The statements that assign `self.attr` in the class's `__init__` (definitions; an attribute
        set in a method `__init__` calls, as `rotary_emb` in `_init_rope`: that call too), then the
        statements of the forward pass (`forward` and the methods it calls) that read it (uses), in
        file order."""
        definitions = self._definitions(cls_name, attr)
        if not definitions:
            if cls_name in self.classes:
                self._note(f"{cls_name} defines no attribute '{attr}'")
            else:
                self._note(f"no class {cls_name} (looked for its attribute '{attr}')")
            return []
        statements = sorted([*self._init_calls(cls_name, attr), *definitions], key=lambda s: s.lineno)
        found = [self.lines(s.lineno, s.end_lineno or s.lineno, DEFINITION) for s in statements]
        uses = self._forward_uses(cls_name).get(attr, [])
        if len(uses) > MAX_USES:
            self._note(
                f"{cls_name}'s forward pass reads '{attr}' in {len(uses):,} statements; the first "
                f"{MAX_USES} are shown"
            )
        found += [self.lines(start, end, USE) for start, end in uses[:MAX_USES]]
        return _unique(found)

    def init_span(self, cls_name: str, attrs: Iterable[str]) -> Evidence | None:
        """One piece of evidence over the statements of the class's `__init__` that define these
        attributes, from the first to the last (DeepseekV3Attention's projections, q_a_proj to o_proj,
        and rotary_emb through `self._init_rope()`), or None when none of them is defined there."""
        statements = []
        for attr in attrs:
            definitions = self._definitions(cls_name, attr)
            if not definitions:
                self._note(f"{cls_name} defines no attribute '{attr}'")
            statements += self._init_calls(cls_name, attr) or [
                s for s in definitions if self._in_init(cls_name, s)
            ]
        if not statements:
            return None
        start = min(s.lineno for s in statements)
        return self.lines(start, max(s.end_lineno or s.lineno for s in statements), DEFINITION)

    def activation(self, cls_name: str, name: str, method: str = "forward") -> list[Evidence]:
        """The assignments in the class's `method` (inherited from a base class of this file if it has
        none of its own) that bind the variable `name`, each a definition, in file order."""
        function = self._searched_method(cls_name, method)
        if function is None:
            return []
        found = [self.lines(start, end, DEFINITION) for start, end in _bindings(function).get(name, ())]
        if not found:
            self._note(f"{cls_name}.{method} binds no variable '{name}'")
        return found

    def calls(self, cls_name: str, function: str, method: str = "forward") -> list[Evidence]:
        """The statements of the class's `method` (inherited if it has none) that call `function`,
        by its last name (`softmax` for nn.functional.softmax; `apply_rotary_pos_emb`; `rotary_emb`
        for self.rotary_emb): where an operation happens, each a use, in file order."""
        found = self._searched_method(cls_name, method)
        if found is None:
            return []
        uses = [
            self.lines(start, end, USE)
            for start, end, nodes, _ in _listed_pieces(found)
            if any(function in _names(node).called for node in nodes)
        ]
        if not uses:
            self._note(f"{cls_name}.{method} calls no {function}")
        return uses

    def activation_classes(self, name: str, method: str = "forward") -> list[str]:
        """The classes whose own `method` binds the variable `name` (compressed_kv: the attention
        class, and the flash-attention subclass that has its own forward), in file order."""
        return [
            cls_name
            for cls_name, node in self.classes.items()
            if (function := _own_method(node, method)) is not None and name in _bindings(function)
        ]

    def attention_class(self) -> str | None:
        """The class the decoder layers' `self_attn` holds (DeepseekV3Attention), as the file builds it."""
        return self.module_class("model.layers.0.self_attn")

    def attention_passages(self) -> dict[str, Evidence]:
        """The passages of the attention class that the pages cite, each found by the statements it
        starts and ends with (in Kimi K2's and DeepSeek-V3's file: 662–688, 768–774, 776–789,
        799–840, 848–852):

        - "projections": __init__'s definitions of the projections and norms, to `self._init_rope()`;
        - "query": from the first statement that binds `q` to the split into q_nope and q_pe;
        - "latent": from the first binding of `compressed_kv` to the split of `kv` into k_nope and
          value_states;
        - "prefill attention": from the rotary tables (`cos, sin =`) to the first binding of
          `attn_output` (the weighted sum of the values);
        - "output": from the next binding of `attn_output` to the one that applies `o_proj`.

        A passage the file does not have is left out, and said as a finding."""
        attention = self.attention_class()
        if attention is None:
            return {}
        passages: dict[str, Evidence] = {}
        projections = self.init_span(attention, [*ATTENTION_PROJECTIONS, "rotary_emb"])
        if projections is not None:
            passages["projections"] = projections

        def bound(name: str) -> list[Evidence]:
            return self.activation(attention, name)

        query, q_pe = bound("q"), bound("q_pe")
        if query and q_pe:
            passages["query"] = self.span(query[0], q_pe[0])
        latent, values = bound("compressed_kv"), bound("value_states")
        if latent and values:
            passages["latent"] = self.span(latent[0], values[0])
        tables, outputs = bound("cos"), bound("attn_output")
        if tables and outputs:
            passages["prefill attention"] = self.span(tables[0], outputs[0])
        projected = [e for e in outputs if "self.o_proj" in e.excerpt]
        if len(outputs) > 1 and projected and projected[-1].start > outputs[1].start:
            passages["output"] = self.span(outputs[1], projected[-1])
        return passages

    def findings(self) -> list[str]:
        """What the file said against the expectations asked of it so far, one line each, in order."""
        return list(self._findings)

    # --- module paths ----------------------------------------------------------------------------

    def resolve(self, path: str) -> list[Step]:
        """The attributes a module path goes through, from the root class down: model.layers.5.
        self_attn.kv_b_proj → (DeepseekV3ForCausalLM, model), (DeepseekV3Model, layers),
        (DeepseekV3DecoderLayer, self_attn), (DeepseekV3Attention, kv_b_proj, nn.Linear). Indices
        (`5`) step into a ModuleList. It stops at a module the file does not define (the `weight` of
        an nn.Linear); an attribute that is not where the path says is a finding, and the steps up
        to it are returned."""
        return self._resolve(path)[0]

    def _resolve(self, path: str) -> tuple[list[Step], bool]:
        """The steps, and whether the whole path was found."""
        if self.root is None:
            self._note(f"no model class (…ForCausalLM) to read {shorten(path, 120)} from")
            return [], False
        raw = [part for part in path.split(".") if part]
        # each attribute with the index that follows it (layers.5: 5), which a ModuleList's
        # comprehension binds (`for layer_idx in range(…)`)
        parts = [
            (part, int(raw[i + 1]) if i + 1 < len(raw) and raw[i + 1].isdigit() else None)
            for i, part in enumerate(raw)
            if not part.isdigit()
        ]
        current: dict[str, Mapping[str, Any]] = {self.root: {}}
        steps: list[Step] = []
        for i, (attr, position) in enumerate(parts):
            owners = [c for c in current if self._definitions(c, attr)]
            if not owners:
                self._note(f"{shorten(path, 120)}: {' or '.join(current)} defines no attribute '{attr}'")
                return steps, False
            owner = owners[0]
            scope = _Evaluator(self, owner, current[owner])
            chosen = chosen_assignment(  # of an if/elif chain of assignments, the one the config takes
                [f for node in self._lineage(owner) for f in self._init_methods(node)],
                self._definitions(owner, attr),
                functools.partial(_decided_in, scope),
            )
            built, external = self._built(_assigned_value(chosen), scope, position)
            following = parts[i + 1][0] if i + 1 < len(parts) else None
            if following is not None and built:
                built = {c: b for c, b in built.items() if self._definitions(c, following)} or built
            kept = self._most_basic(list(built))
            steps.append(Step(owner, attr, tuple(kept), external, current[owner]))
            if not kept:  # an nn.Linear's weight and the like: defined by torch, not by this file
                break
            current = {c: built[c] for c in kept}
        return steps, True

    def module_class(self, path: str) -> str | None:
        """The class of this file a module path holds (model.layers.0.self_attn: DeepseekV3Attention;
        model.layers.1.mlp: DeepseekV3MoE, the first where it may hold several), or None: so pages
        name the attention class as the file does (DeepseekV2Attention in DeepSeek-V2's)."""
        steps, complete = self._resolve(path)
        return steps[-1].holds[0] if complete and steps and steps[-1].holds else None

    def path_evidence(self, path: str, within: str | None = None) -> list[Evidence]:
        """Evidence for a module or tensor path: the definitions and uses of the module's attribute in
        the class that holds it, and the class of the module itself where the file defines it (an
        RMSNorm, an MLP, the MoE). `within`, a longer path under it (a tensor's name), picks the
        class where the attribute may hold several (`mlp`: the MoE for mlp.gate.weight)."""
        steps, complete = self._resolve(within or path)
        if not complete:
            return []
        depth = len([part for part in path.split(".") if part and not part.isdigit()])
        steps = steps[:depth]
        modules = [s for s in steps if s.external not in ("nn.Parameter", "Parameter")]
        if not modules:  # the model itself
            return self.class_passage(self.root) if self.root and depth == 0 else []
        step = modules[-1]
        found = self.attribute(step.owner, step.attr)
        for cls_name in step.holds:
            found += self.class_passage(cls_name)
        return _unique(found)

    def component_evidence(
        self, node: Node, parent: Node | None = None, weight_prefix: str = ""
    ) -> list[Evidence]:
        """Evidence for a component of the tree (kimicount.anatomy), in the module its tensors sit in
        (Latent attention: `self_attn`, in DeepseekV3DecoderLayer, and DeepseekV3Attention; Key content
        up-projection: `kv_b_proj`); where that is the module of its parent too (Query compression and
        Key heads sit in `self_attn` beside other components), the evidence of its own parts: its
        children's, or each tensor's (q_a_proj, q_a_layernorm)."""
        names = _tensor_names(node, weight_prefix)
        if not names:
            return []
        module = _common_module(names)
        if parent is None or module != _common_module(_tensor_names(parent, weight_prefix)):
            return self.path_evidence(module, within=names[0])
        found: list[Evidence] = []
        if node.children:
            for child in node.children:
                found += self.component_evidence(child, node, weight_prefix)
        else:
            for name in names:
                found += self.path_evidence(name)
        return _unique(found)

    # --- shapes ----------------------------------------------------------------------------------

    def linear_shape(
        self,
        cls_name: str,
        attr: str,
        config: Mapping[str, Any] | None = None,
        bindings: Mapping[str, Any] | None = None,
    ) -> tuple[int, int] | None:
        """[out_features, in_features] of the nn.Linear that `__init__` assigns to `self.attr`, worked
        out with the config's values (the index's own config unless given) and the constructor's
        arguments (`bindings`: intermediate_size=2048 for an expert), or None where the file does not
        say it in terms those decide."""
        definitions = self._definitions(cls_name, attr)
        if not definitions:
            return None
        value = _assigned_value(definitions[-1])
        if not (isinstance(value, ast.Call) and _dotted(value.func).split(".")[-1] == "Linear"):
            return None
        arguments = {k.arg: k.value for k in value.keywords if k.arg}
        in_expr = value.args[0] if value.args else arguments.get("in_features")
        out_expr = value.args[1] if len(value.args) > 1 else arguments.get("out_features")
        if in_expr is None or out_expr is None:
            return None
        values = _Evaluator(self, cls_name, bindings or {}, self.config if config is None else config)
        in_features, out_features = values.eval(in_expr), values.eval(out_expr)
        if type(in_features) is not int or type(out_features) is not int:
            return None
        return out_features, in_features

    def check_shape(
        self,
        cls_name: str,
        attr: str,
        expected: tuple[int, int],
        config: Mapping[str, Any] | None = None,
        bindings: Mapping[str, Any] | None = None,
        where: str = "",
    ) -> bool | None:
        """Whether the Linear `cls_name.attr` works out to `expected` [out, in] with the config's values
        (None where the file does not say it in the config's terms); a difference is a finding."""
        shape = self.linear_shape(cls_name, attr, config, bindings)
        if shape is None:
            return None
        if shape != expected:
            definition = self._definitions(cls_name, attr)[-1]
            lines = self.lines(
                definition.lineno, definition.end_lineno or definition.lineno, DEFINITION
            ).lines
            self._note(
                f"{where}{cls_name}.{attr} (line{'s' if '–' in lines else ''} {lines}) is a Linear "
                f"of [{shape[0]:,}, {shape[1]:,}] with this config; the tree expects "
                f"[{expected[0]:,}, {expected[1]:,}]"
            )
            return False
        return True

    def check_tensor(self, name: str, shape: Sequence[int]) -> bool | None:
        """Whether the tensor `name` (a Linear's weight, [out, in]) has, by the file's expression
        worked out with the index's config and the constructors' arguments along the way, the shape
        the tree gives it; None where the file does not say (not a Linear, or a size it leaves
        open). A missing attribute or another size is a finding."""
        steps, complete = self._resolve(name)
        linear = [s for s in steps if s.external and s.external.split(".")[-1] == "Linear"]
        if not (complete and linear and len(shape) == 2):
            return None
        step = linear[-1]
        return self.check_shape(step.owner, step.attr, (shape[0], shape[1]), None, step.bindings, f"{name}: ")

    def check_tree(self, model: Node, weight_prefix: str = "") -> list[str]:
        """Every tensor of the tree looked for in the file: each must sit where its name says, and
        each Linear weight must work out, with the index's config, to the shape the tree gives it
        (for each kind of block: the first dense and the first MoE layer). Returns the findings."""
        seen: set[str] = set()
        for node in model.walk():
            for tensor in node.tensors:
                name = _first_name(tensor.pattern, weight_prefix, tensor.layers)
                if name not in seen:
                    seen.add(name)
                    self.check_tensor(name, tensor.shape)
        return self.findings()

    # --- the file's structure --------------------------------------------------------------------

    def _note(self, text: str) -> None:
        line = f"{self.file}: {text}"
        if line not in self._findings:
            self._findings.append(line)

    def _lineage(self, cls_name: str) -> list[ast.ClassDef]:
        """The class and its base classes defined in this file, nearest first."""
        found: list[ast.ClassDef] = []
        pending = [cls_name]
        while pending:
            node = self.classes.get(pending.pop(0))
            if node is None or node in found:
                continue
            found.append(node)
            pending += [_dotted(base) for base in node.bases]
        return found

    def _method(self, cls_name: str, method: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for node in self._lineage(cls_name):
            function = _own_method(node, method)
            if function is not None:
                return function
        return None

    def _searched_method(self, cls_name: str, method: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method, as _method finds it; where there is none, that is noted as a finding."""
        function = self._method(cls_name, method)
        if function is None:
            self._note(
                f"{cls_name} has no method {method}" if cls_name in self.classes else f"no class {cls_name}"
            )
        return function

    def _init_methods(self, node: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        return self._called_methods(node, "__init__")

    def _definitions(self, cls_name: str, attr: str) -> list[ast.stmt]:
        """The statements of the nearest class in the lineage whose __init__ assigns self.attr."""
        key = (cls_name, attr)
        if key not in self._assignments:
            self._assignments[key] = self._find_definitions(cls_name, attr)
        return self._assignments[key]

    def _find_definitions(self, cls_name: str, attr: str) -> list[ast.stmt]:
        for node in self._lineage(cls_name):
            statements = [
                statement
                for function in self._init_methods(node)
                for statement in ast.walk(function)
                if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign)
                and any(_is_self_attr(t, attr) for t in _targets(statement))
            ]
            if statements:
                return sorted(statements, key=lambda s: s.lineno)
        return []

    def _init_calls(self, cls_name: str, attr: str) -> list[ast.stmt]:
        """The statements of `__init__` that call the method (`self._init_rope()`) in which the
        class sets `self.attr`, where it does not set it in `__init__` itself."""
        for node in self._lineage(cls_name):
            init = _own_method(node, "__init__")
            helpers = [
                f
                for f in self._called_methods(node, "__init__")[1:]
                if any(
                    isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign)
                    and any(_is_self_attr(t, attr) for t in _targets(s))
                    for s in ast.walk(f)
                )
            ]
            if init is not None and helpers:
                names = {f.name for f in helpers}
                return [
                    statement
                    for _, _, nodes, statement in _listed_pieces(init)
                    if statement is not None and any(_calls_self(n, names) for n in nodes)
                ]
        return []

    def _in_init(self, cls_name: str, statement: ast.stmt) -> bool:
        return any(
            (init := _own_method(node, "__init__")) is not None and statement in list(ast.walk(init))
            for node in self._lineage(cls_name)
        )

    def _called_methods(
        self, node: ast.ClassDef, method: str
    ) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        """The method and the methods of the same class it calls as self.method() (`__init__` calls
        `_init_rope`; the MoE's `forward` calls `moe_infer`), and those they call; the method first."""
        found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        pending = [method]
        while pending:
            function = _own_method(node, pending.pop(0))
            if function is None or function in found:
                continue
            found.append(function)
            pending += _names(function).self_calls
        return found

    def _forward_uses(self, cls_name: str) -> dict[str, list[tuple[int, int]]]:
        """The lines of the class's forward pass (its `forward` and the methods it calls) that read each
        attribute of self, every attribute in one pass: each page asks for one, and a forward of tens
        of thousands of statements is then read once, not once a page."""
        uses = self._uses.get(cls_name)
        if uses is None:
            uses = {}
            for start, end, nodes, _ in self._forward_pieces(cls_name):
                for attr in frozenset().union(*(_names(node).self_reads for node in nodes)):
                    uses.setdefault(attr, []).append((start, end))
            self._uses[cls_name] = uses
        return uses

    def _forward_pieces(self, cls_name: str) -> Iterator[tuple[int, int, list[ast.AST], ast.stmt | None]]:
        """The pieces of the class's own `forward` and of the methods it calls."""
        node = self.classes.get(cls_name)
        if node is None:
            return
        for function in self._called_methods(node, "forward"):
            yield from _listed_pieces(function)

    def _built(
        self, value: ast.expr | None, scope: _Evaluator, position: int | None
    ) -> tuple[dict[str, Mapping[str, Any]], str | None]:
        """The classes of this file an expression builds, each with its constructor's arguments as
        far as the config decides them, or else the name of what it builds ('nn.Linear'). A
        conditional the config decides (`DeepseekV3MoE(config) if layer_idx >= …`) is decided;
        `position` is the index a ModuleList's comprehension runs over."""
        if isinstance(value, ast.IfExp):
            test = scope.eval(value.test)
            if test is not _UNKNOWN:
                return self._built(value.body if test else value.orelse, scope, position)
            body, body_external = self._built(value.body, scope, position)
            other, other_external = self._built(value.orelse, scope, position)
            return {
                **body,
                **{c: b for c, b in other.items() if c not in body},
            }, body_external or other_external
        if isinstance(value, ast.List | ast.Tuple | ast.Set):
            built: dict[str, Mapping[str, Any]] = {}
            external = None
            for element in value.elts:
                found, found_external = self._built(element, scope, position)
                built = {**built, **{c: b for c, b in found.items() if c not in built}}
                external = external or found_external
            return built, external
        if isinstance(value, ast.ListComp | ast.GeneratorExp):
            target = value.generators[0].target
            if position is not None and isinstance(target, ast.Name):
                scope = scope.with_bindings({target.id: position})
            return self._built(value.elt, scope, position)
        if isinstance(value, ast.Dict):
            return self._built(ast.List(elts=[v for v in value.values if v is not None]), scope, position)
        if isinstance(value, ast.Name):
            if value.id in self.classes:
                return {value.id: {}}, None
            if value.id in self._globals and value.id not in scope.visiting:
                scope.visiting.add(value.id)  # `A = B; B = A` ends here
                try:
                    return self._built(self._globals[value.id], scope, position)
                finally:
                    scope.visiting.discard(value.id)
            return {}, value.id
        if not isinstance(value, ast.Call):
            return {}, None
        function = value.func
        if isinstance(function, ast.Subscript):  # ATTENTION_CLASSES[config._attn_implementation](…)
            classes, external = self._built(function.value, scope, position)
            return {c: self._bind(c, value, scope) for c in classes}, external
        name = _dotted(function)
        if name in self.classes:
            return {name: self._bind(name, value, scope)}, None
        if name.split(".")[-1] in _CONTAINERS and value.args:
            return self._built(value.args[0], scope, position)
        return {}, name or None

    def _bind(self, cls_name: str, call: ast.Call, scope: _Evaluator) -> dict[str, Any]:
        """The class's __init__ parameters that this call gives values the config decides (and the
        constant defaults of the others): DeepseekV3MLP(config, intermediate_size=…) → its width."""
        function = self._method(cls_name, "__init__")
        if function is None:
            return {}
        parameters = [*function.args.posonlyargs, *function.args.args][1:]  # after self
        bound: dict[str, Any] = {}
        defaults = function.args.defaults
        for parameter, default in zip(parameters[len(parameters) - len(defaults) :], defaults, strict=True):
            if isinstance(default, ast.Constant):
                bound[parameter.arg] = default.value
        for parameter, argument in zip(parameters, call.args, strict=False):
            if isinstance(argument, ast.Starred):
                break
            bound[parameter.arg] = scope.eval(argument)
        for keyword in call.keywords:
            if keyword.arg is not None:
                bound[keyword.arg] = scope.eval(keyword.value)
        return {k: v for k, v in bound.items() if v is not _UNKNOWN and k != "config"}

    def _most_basic(self, classes: list[str]) -> list[str]:
        """Of a class and its subclass (DeepseekV3Attention and DeepseekV3FlashAttention2), the class."""
        return [
            c
            for c in classes
            if not any(other != c and self.classes[other] in self._lineage(c) for other in classes)
        ]


# --- statements ------------------------------------------------------------------------------------


def _pieces(body: Sequence[ast.stmt]) -> Iterator[tuple[int, int, list[ast.AST], ast.stmt | None]]:
    """(first line, last line, the expressions there, the statement or None for a header) for each
    simple statement of a body, and for each compound one its header alone (`if self.q_lora_rank is
    None:`), then its bodies. Nested functions and classes are left out."""
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(statement, ast.If | ast.While):
            yield statement.lineno, _end(statement.test), [statement.test], None
            yield from _pieces(statement.body)
            yield from _pieces(statement.orelse)
        elif isinstance(statement, ast.For | ast.AsyncFor):
            yield statement.lineno, _end(statement.iter), [statement.target, statement.iter], None
            yield from _pieces(statement.body)
            yield from _pieces(statement.orelse)
        elif isinstance(statement, ast.With | ast.AsyncWith):
            header: list[ast.AST] = [item.context_expr for item in statement.items]
            yield statement.lineno, max(_end(e) for e in header), header, None
            yield from _pieces(statement.body)
        elif isinstance(statement, ast.Try):
            yield from _pieces(statement.body)
            for handler in statement.handlers:
                yield from _pieces(handler.body)
            yield from _pieces(statement.orelse)
            yield from _pieces(statement.finalbody)
        else:
            yield statement.lineno, statement.end_lineno or statement.lineno, [statement], statement


def _listed_pieces(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
) -> list[tuple[int, int, list[ast.AST], ast.stmt | None]]:
    """_pieces of a function's body, listed once and kept on the function (every page asks for them)."""
    pieces = getattr(function, "_kimicount_pieces", None)
    if pieces is None:
        pieces = list(_pieces(function.body))
        setattr(function, "_kimicount_pieces", pieces)  # noqa: B010 (an attribute ast does not declare)
    return pieces


def _bindings(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[tuple[int, int]]]:
    """The lines of each assignment of the function's body, by the variable it binds: found once and
    kept on the function."""
    bindings = getattr(function, "_kimicount_bindings", None)
    if bindings is None:
        bindings = {}
        for start, end, _, statement in _listed_pieces(function):
            if statement is not None:
                for name in _bound_names(statement):
                    bindings.setdefault(name, []).append((start, end))
        setattr(function, "_kimicount_bindings", bindings)  # noqa: B010 (an attribute ast does not declare)
    return bindings


def _end(node: ast.AST) -> int:
    end = getattr(node, "end_lineno", None) or getattr(node, "lineno", None)
    return end if isinstance(end, int) else 0


def _own_method(node: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next(
        (f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == name),
        None,
    )


def _targets(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return list(statement.targets)
    if isinstance(statement, ast.AnnAssign | ast.AugAssign):
        return [statement.target]
    return []


def _assigned_value(statement: ast.stmt) -> ast.expr | None:
    return getattr(statement, "value", None)


def _flatten(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _flatten(element)
    elif isinstance(target, ast.Starred):
        yield from _flatten(target.value)
    else:
        yield target


def _is_self_dot(node: ast.AST, attr: str | None = None) -> bool:
    """Whether the node is `self.attr` (any attribute of self when attr is None)."""
    return (
        isinstance(node, ast.Attribute)
        and (attr is None or node.attr == attr)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _is_self_attr(target: ast.expr, attr: str) -> bool:
    return any(_is_self_dot(t, attr) for t in _flatten(target))


def _bound_names(statement: ast.stmt) -> set[str]:
    """The plain variables an assignment binds (`compressed_kv, k_pe = …` binds both)."""
    return {t.id for target in _targets(statement) for t in _flatten(target) if isinstance(t, ast.Name)}


class _Names(NamedTuple):
    """What a node's code names, found in one walk: the attributes of self it reads, the methods of
    self it calls (in the order ast.walk meets them) and the last name of everything it calls
    (`softmax` for nn.functional.softmax)."""

    self_reads: frozenset[str]
    self_calls: tuple[str, ...]
    called: frozenset[str]


def _names(node: ast.AST) -> _Names:
    """_Names of the node, found once and kept on it: each page's questions of the forward pass then
    cost a look-up per statement, not a walk of it (a forward of 47,000 statements, a 1 MiB file, took
    56 s to search for every page; benchmarks/hostile_input.py)."""
    found = getattr(node, "_kimicount_names", None)
    if found is None:
        reads: set[str] = set()
        self_calls: dict[str, None] = {}
        called: set[str] = set()
        for n in ast.walk(node):
            if _is_self_dot(n):
                reads.add(n.attr)  # type: ignore[attr-defined]
            if isinstance(n, ast.Call):
                called.add(_dotted(n.func).rsplit(".", 1)[-1])
                if _is_self_dot(n.func):
                    self_calls[n.func.attr] = None  # type: ignore[attr-defined]
        found = _Names(frozenset(reads), tuple(self_calls), frozenset(called))
        node._kimicount_names = found  # type: ignore[attr-defined]
    return found


def _reads_self(node: ast.AST, attr: str) -> bool:
    return attr in _names(node).self_reads


def _calls_self(node: ast.AST, names: set[str]) -> bool:
    """Whether the node calls self.<one of names>()."""
    return not names.isdisjoint(_names(node).self_calls)


def _dotted(node: ast.expr) -> str:
    """'nn.Linear' for nn.Linear, 'DeepseekV3MLP' for a name; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _unique(found: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[int, int, str]] = set()
    kept = []
    for evidence in found:
        key = (evidence.start, evidence.end, evidence.role)
        if key not in seen:
            seen.add(key)
            kept.append(evidence)
    return kept


def _tensor_names(node: Node, prefix: str) -> list[str]:
    return [_first_name(t.pattern, prefix, t.layers) for n in node.walk() for t in n.tensors]


def _first_name(pattern: str, prefix: str, layers: tuple[int, ...]) -> str:
    """The first concrete tensor name of a pattern, without the weight prefix ('language_model.')."""
    name = pattern.format(layer=layers[0] if layers else 0, expert=0)
    return name[len(prefix) :] if prefix and name.startswith(prefix) else name


def _common_module(names: Sequence[str]) -> str:
    """The module every tensor name sits in: the longest common run of dotted parts, less the last
    part of a single tensor name (its parameter: `weight`).

    >>> _common_module(["model.layers.1.self_attn.kv_b_proj.weight", "model.layers.1.self_attn.o_proj.weight"])
    'model.layers.1.self_attn'
    >>> _common_module(["model.norm.weight"]), _common_module(["model.norm.weight", "lm_head.weight"])
    ('model.norm', '')
    """
    split = [name.split(".") for name in names]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    if len(common) == min(len(s) for s in split):
        common = common[:-1]
    return ".".join(common)


#: What an expression is when the config and the constructor's arguments do not decide it.
_UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "<unknown>"})()

_ARITHMETIC = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else _UNKNOWN,
    ast.Mod: lambda a, b: a % b if b else _UNKNOWN,
}
_COMPARISONS = {
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


def _decided_in(scope: _Evaluator, test: ast.expr) -> bool | None:
    """A condition's truth as the config, seen from `scope`, decides it; None where it does not."""
    return _decided(scope.eval(test))


def _decided(value: Any) -> bool | None:
    """A condition's truth as the config decides it, None where it does not."""
    return None if value is _UNKNOWN else bool(value)


class _Evaluator:
    """The value of an expression in a class's __init__ as far as the config decides it: `config.X`
    from config.json, the constructor's arguments (`bindings`), `self.X` and local variables from the
    __init__ assignments, integer arithmetic, comparisons, `and`/`or`/`not`, conditionals and
    `hasattr(config, …)`. Anything else is _UNKNOWN: enough for the sizes the file gives nn.Linear and
    the conditions that choose a layer's MLP."""

    def __init__(
        self,
        index: ModelingIndex,
        cls_name: str,
        bindings: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
    ):
        self.index, self.cls_name = index, cls_name
        self.bindings = dict(bindings or {})
        self.config = index.config if config is None else config
        self.depth = 0
        #: The self attributes and local names being worked out: one met again is a cycle
        #: (`self.x = self.x * self.x`), _UNKNOWN, not a loop without end.
        self.visiting: set[str] = set()
        #: Definitions already worked out: a chain of them (`self.b = self.a * self.a`, …) is
        #: evaluated once each, not once per path through it.
        self.known: dict[str, Any] = {}

    def with_bindings(self, extra: Mapping[str, Any]) -> _Evaluator:
        return _Evaluator(self.index, self.cls_name, {**self.bindings, **extra}, self.config)

    def eval(self, node: ast.expr) -> Any:
        self.depth += 1
        try:
            return _UNKNOWN if self.depth > 50 else self._eval(node)
        except (TypeError, ValueError, OverflowError):  # a comparison of None with an int, say
            return _UNKNOWN
        finally:
            self.depth -= 1

    def _eval(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            left, right = self.eval(node.left), self.eval(node.right)
            if type(left) is not int or type(right) is not int:
                return _UNKNOWN
            result = _ARITHMETIC[type(node.op)](left, right)
            # no size is larger than a count can be; a larger one is no size (and never grows past it)
            return result if result is _UNKNOWN or abs(result) <= MAX_COUNT else _UNKNOWN
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARISONS:
            left, right = self.eval(node.left), self.eval(node.comparators[0])
            if left is _UNKNOWN or right is _UNKNOWN:
                return _UNKNOWN
            return _COMPARISONS[type(node.ops[0])](left, right)
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v) for v in node.values]
            decisive = isinstance(node.op, ast.Or)  # or: any true decides; and: any false decides
            if any(v is not _UNKNOWN and bool(v) == decisive for v in values):
                return decisive
            return _UNKNOWN if any(v is _UNKNOWN for v in values) else not decisive
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value = self.eval(node.operand)
            return _UNKNOWN if value is _UNKNOWN else not value
        if isinstance(node, ast.IfExp):
            test = self.eval(node.test)
            return _UNKNOWN if test is _UNKNOWN else self.eval(node.body if test else node.orelse)
        if isinstance(node, ast.Call) and _dotted(node.func).startswith("config.") and not node.keywords:
            return self._config_call(node)
        if isinstance(node, ast.Call) and _dotted(node.func) == "hasattr" and len(node.args) == 2:
            target, attribute = node.args
            if isinstance(target, ast.Name) and target.id == "config" and isinstance(attribute, ast.Constant):
                return attribute.value in self.config
            return _UNKNOWN
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Subscript):  # config.linear_attn_config["head_dim"]: a nested config value
            container, key = self.eval(node.value), self.eval(node.slice)
            return (
                container.get(key, _UNKNOWN)
                if isinstance(container, Mapping) and type(key) is str
                else _UNKNOWN
            )
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "config":
                if node.attr in self.config:
                    return self.config[node.attr]
                known, value = config_property(self.config, node.attr)  # KimiLinearConfig.is_mla
                return value if known else _UNKNOWN
            if node.value.id == "self":
                definitions = self.index._definitions(self.cls_name, node.attr)
                if len(definitions) == 1 and isinstance(definitions[0], ast.Assign):
                    return self._once(f"self.{node.attr}", definitions[0].value)
        return _UNKNOWN

    def _config_call(self, node: ast.Call) -> Any:
        """`config.method(args)` as the family's configuration class computes it
        (kimicount.explorer.evidence_kda: KimiLinearConfig.is_kda_layer), _UNKNOWN otherwise."""
        args = [self.eval(a) for a in node.args]
        if any(a is _UNKNOWN for a in args):
            return _UNKNOWN
        known, value = config_call(self.config, _dotted(node.func).removeprefix("config."), args)
        return value if known else _UNKNOWN

    def _once(self, name: str, value: ast.expr) -> Any:
        """The value of a definition, _UNKNOWN when it depends on itself."""
        if name in self.known:
            return self.known[name]
        if name in self.visiting:
            return _UNKNOWN
        self.visiting.add(name)
        try:
            self.known[name] = self.eval(value)
        finally:
            self.visiting.discard(name)
        return self.known[name]

    def _name(self, name: str) -> Any:
        """A constructor argument, or a local variable __init__ assigns once."""
        if name in self.bindings:
            return self.bindings[name]
        init = self.index._method(self.cls_name, "__init__")
        if init is None:
            return _UNKNOWN
        assignments = [
            s
            for s in ast.walk(init)
            if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets)
        ]
        return self._once(name, assignments[0].value) if len(assignments) == 1 else _UNKNOWN


# --- config.json -----------------------------------------------------------------------------------

_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+')


def config_evidence(
    text: str, keys: Iterable[str], *, revision: str | None, file: str = "config.json"
) -> list[Evidence]:
    """The lines of each top-level key of config.json that is there (a nested object: from its key to
    its closing brace), in the order asked; keys that are not there give nothing. Text that is not a
    JSON object is a ConfigError naming the file."""
    parsed = parse_json(text, file, ConfigError)
    if not isinstance(parsed, dict):
        raise ConfigError(f"{file}: expected a JSON object, found a JSON {type(parsed).__name__}")
    spans = _top_level_spans(text)
    lines = _LINE_BREAK.split(text)
    found = []
    for key in keys:
        if key in spans:
            start, end = spans[key]
            found.append(Evidence(file, revision, start, end, CONFIG, "\n".join(lines[start - 1 : end])))
    return found


def _top_level_spans(text: str) -> dict[str, tuple[int, int]]:
    """key -> (line of the key, line where its value ends) for the top-level object of valid JSON
    (a repeated key: its last occurrence, the one json.loads keeps)."""
    breaks = [match.end() for match in _LINE_BREAK.finditer(text)]

    def line(offset: int) -> int:
        return bisect.bisect_right(breaks, offset) + 1

    spans: dict[str, tuple[int, int]] = {}
    depth = 0
    key: tuple[str, int] | None = None  # the key whose value is being read, and its offset
    expect_key = False
    value_start = False
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "{[":
            if depth == 1 and value_start and key is not None:
                value_start = False
            depth += 1
            expect_key = depth == 1 and token == "{"
            continue
        if token in "}]":
            depth -= 1
            if depth == 1 and key is not None:  # the end of a nested value
                spans[key[0]] = (line(key[1]), line(match.start()))
                key = None
            continue
        if depth != 1:
            continue
        if token == ",":
            expect_key = True
        elif token == ":":
            value_start = True
        elif expect_key and token.startswith('"'):
            key = (parse_json(token, "config.json key", ConfigError), match.start())
            expect_key = False
        elif value_start and key is not None:  # a scalar value
            spans[key[0]] = (line(key[1]), line(match.end() - 1))
            key, value_start = None, False
    return spans
