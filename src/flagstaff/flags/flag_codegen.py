"""Code generation: one Python function per compiled flag (and per dynamic cohort).

``flag_builder`` turns stored definitions into ``CompiledFlag`` records; this module writes
each record's evaluation as straight-line code: person property look-ups and dependency
values inline, the rollout and variant hashes written out, and every outcome's result built
once, here. The semantics are those documented on ``CompiledFlag``: conditions in order,
the first that matches and is inside its rollout wins; otherwise the highest-ranked miss is
reported (out of rollout > no match > no group type), a later condition with an equal rank
taking over the index. With ``filters.early_exit``, a rollout miss after matching
properties ends the evaluation.

The source holds only names made here, integer indexes and fixed code: every value taken
from the definitions (keys, thresholds, tests, results) is bound through the function's
globals, so no text from a definition is ever compiled.

Each function's source is registered with ``linecache`` under a pseudo-filename such as
``<flagstaff-flag:KEY:VERSION>`` (``<flagstaff-cohort:ID>`` for cohorts), so tracebacks,
``pdb`` and ``inspect.getsource`` show it; ``GeneratedSources`` drops the entries when the
definitions version that owns them is released.
"""

from __future__ import annotations

import functools
import linecache
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import TYPE_CHECKING, Any

from flagstaff.flags.context import MISSING, Context, EvaluationError
from flagstaff.flags.filters import CallCheck, Check, DependencyCheck, PropertyCheck
from flagstaff.flags.hashing import (
    VARIANT_SALT,
    first_64_bits,
    rollout_limit,
    sha1,
    variant_limit,
)
from flagstaff.flags.model import (
    CONDITION_MATCH,
    GROUPS_NOT_EVALUATED_DESCRIPTION,
    NO_CONDITION_MATCH,
    NO_GROUP_TYPE,
    OUT_OF_ROLLOUT_BOUND,
    FlagResult,
)
from flagstaff.flags.operators import always, never

if TYPE_CHECKING:
    from flagstaff.flags.compiled_flag import CompiledFlag, Condition

NO_GROUP_TYPE_RANK = 1
NO_MATCH_RANK = 2
OUT_OF_ROLLOUT_RANK = 3
_CODES = {
    NO_GROUP_TYPE_RANK: NO_GROUP_TYPE,
    NO_MATCH_RANK: NO_CONDITION_MATCH,
    OUT_OF_ROLLOUT_RANK: OUT_OF_ROLLOUT_BOUND,
}
_GLOBALS: dict[str, Any] = {
    "MISSING": MISSING,
    "EvaluationError": EvaluationError,
    "VARIANT_SALT": VARIANT_SALT,
    "first_64_bits": first_64_bits,
    "sha1": sha1,
}
_ENCODING = '"utf-8", "surrogatepass"'


MAX_NESTING = 32
MAX_ENTRIES = 1000
"""Cohort trees nested deeper than MAX_NESTING (Python's parser limits nesting) or with
more than MAX_ENTRIES nodes (compiling costs ~25 us per filter, closures ~5) keep
closures."""


class Combination:
    """Cohort entries joined by AND (``any_of`` False) or OR, decided in order."""

    __slots__ = ("any_of", "parts")

    def __init__(self, any_of: bool, parts: tuple[Node, ...]) -> None:
        self.any_of = any_of
        self.parts = parts


class Negation:
    __slots__ = ("part",)

    def __init__(self, part: Node) -> None:
        self.part = part


Node = Combination | Negation | Check | bool


@functools.lru_cache(maxsize=4096)
def _compiled(text: str) -> CodeType:
    """Compiling is most of the generation's cost, and flags of one shape (every plain
    rollout, say) have the same text; so does an unchanged flag at the next version."""
    return compile(text, "<generated flag>", "exec")


_registered: dict[str, tuple[str, int]] = {}
"""Pseudo-filename -> (source, number of live definitions versions using it)."""
_registry_lock = threading.Lock()


def _release(names: Iterable[str]) -> None:
    with _registry_lock:
        for name in names:
            text, users = _registered.get(name, ("", 0))
            if users > 1:
                _registered[name] = (text, users - 1)
            else:
                _registered.pop(name, None)
                linecache.cache.pop(name, None)


class GeneratedSources:
    """The pseudo-files of one definitions version's generated functions.

    Each source is put in ``linecache`` while a version using it is alive; ``release()``
    (called when the compiled definitions are garbage-collected, i.e. replaced by a newer
    version and no request uses them) drops the entries no other version shares.
    """

    __slots__ = ("names",)

    def __init__(self) -> None:
        self.names: list[str] = []

    def register(self, stem: str, text: str) -> str:
        """Register ``text`` as ``<flagstaff-STEM>`` (with ``#N`` when another live
        version has a different source under that name); return the filename."""
        base = name = f"<flagstaff-{stem}>"
        with _registry_lock:
            number = 1
            while name in _registered and _registered[name][0] != text:
                number += 1
                name = f"{base[:-1]}#{number}>"
            users = _registered.get(name, (text, 0))[1]
            _registered[name] = (text, users + 1)
            linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        self.names.append(name)
        return name

    def release(self) -> None:
        names, self.names = self.names, []
        _release(names)


def _renamed(code: CodeType, filename: str) -> CodeType:
    consts = tuple(
        _renamed(const, filename) if isinstance(const, CodeType) else const
        for const in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


class _Source:
    """A function's source being written, and the globals it will run with."""

    text: str

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = dict(_GLOBALS)
        self._lines: list[str] = []
        self._depth = 1
        self._reads_person = False

    def _finish(self) -> None:
        self.text = "def evaluate(ctx):\n" + "\n".join(self._lines) + "\n"

    def function(self, sources: GeneratedSources, stem: str) -> Callable[[Context], Any]:
        """The compiled function, its source registered in ``sources`` as ``stem``."""
        exec(_compiled(self.text), self.namespace)
        function: Callable[[Context], Any] = self.namespace["evaluate"]
        function.__code__ = _renamed(function.__code__, sources.register(stem, self.text))
        return function

    def _bind(self, stem: str, value: Any) -> str:
        name = f"{stem}_{len(self.namespace) - len(_GLOBALS)}"
        self.namespace[name] = value
        return name

    def _line(self, text: str) -> None:
        self._lines.append("    " * self._depth + text)

    @contextmanager
    def _indented(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    # -- checks --------------------------------------------------------------------------

    def _checks(self, checks: tuple[Check, ...]) -> str | None:
        """One expression, true when every check passes (in order); None when always."""
        parts = [self._check(check) for check in checks]
        parts = [part for part in parts if part != "True"]
        return " and ".join(parts) if parts else None

    def _check(self, check: Check) -> str:
        if isinstance(check, PropertyCheck):
            if check.person:
                return self._person_check(check)
            if check.group_name is None:
                return str(check.if_missing)
            return f"{self._bind('CHECK', check.matcher())}(ctx)"
        if isinstance(check, DependencyCheck):
            value = f"values.get({check.target}, False)"
            if check.expected is True:
                return f"{value} is not False"
            if check.expected is False:
                return f"{value} is False"
            if isinstance(check.expected, str):
                return f"{value} == {self._bind('EXPECTED', check.expected)}"
            return "False"
        assert isinstance(check, CallCheck)
        return f"{self._bind('CHECK', check.call)}(ctx)"

    def _person_check(self, check: PropertyCheck) -> str:
        self._reads_person = True
        key = self._bind("KEY", check.key)
        test = check.test
        if check.key == "distinct_id":
            if test is always or test is never:
                return str(test is always)
            stored = f"(value := person.get({key}, MISSING)) is not MISSING"
            value = f"value if {stored} else ctx.distinct_id"
            return f"{self._bind('TEST', test)}({value})"
        if test is always:
            return "True" if check.if_missing else f"{key} in person"
        if test is never:
            return f"{key} not in person" if check.if_missing else "False"
        call = f"{self._bind('TEST', test)}(value)"
        if check.if_missing:
            return f"((value := person.get({key}, MISSING)) is MISSING or {call})"
        return f"((value := person.get({key}, MISSING)) is not MISSING and {call})"


class CohortSource(_Source):
    """The generated membership function of one dynamic cohort, decided at most once per
    request (the answer is kept in ``ctx.cohort_results``)."""

    def __init__(self, cohort_id: int, tree: Node) -> None:
        super().__init__()
        expression = self._node(tree)
        cohort = self._bind("COHORT", cohort_id)
        self._line(f"known = ctx.cohort_results.get({cohort})")
        self._line("if known is None:")
        with self._indented():
            if self._reads_person:
                self._line("person = ctx.person")
            self._line(f"known = ctx.cohort_results[{cohort}] = True if {expression} else False")
        self._line("return known")
        self._finish()

    def function(self, sources: GeneratedSources, stem: str) -> Callable[[Context], bool]:
        function: Callable[[Context], bool] = super().function(sources, stem)
        return function

    def _node(self, node: Node) -> str:
        if isinstance(node, bool):
            return str(node)
        if isinstance(node, Negation):
            return f"(not {self._node(node.part)})"
        if isinstance(node, Combination):
            if not node.parts:
                return str(not node.any_of)
            joiner = " or " if node.any_of else " and "
            return "(" + joiner.join(self._node(part) for part in node.parts) + ")"
        return self._check(node)


class FlagSource(_Source):
    """The generated function of one flag."""

    def __init__(self, flag: CompiledFlag, *, catch: bool, record: bool) -> None:
        super().__init__()
        self.flag = flag
        self.record = record
        # The highest rank a miss before the current condition can have set.
        self._max_rank = NO_GROUP_TYPE_RANK
        self._prefix = self._bind("PREFIX", flag.prefix)
        if catch:
            self._line("try:")
            with self._indented():
                self._body()
            self._line("except EvaluationError as error:")
            with self._indented():
                self._line(f"return {self._bind('FAILED', flag.failed_result)}(ctx, str(error))")
        else:
            self._body()
        self._finish()

    def function(self, sources: GeneratedSources, stem: str) -> Callable[[Context], FlagResult]:
        function: Callable[[Context], FlagResult] = super().function(sources, stem)
        return function

    # -- the flag ------------------------------------------------------------------------

    def _body(self) -> None:
        flag = self.flag
        conditions = flag.conditions
        checks = [check for condition in conditions for check in condition.checks]
        if any(isinstance(check, PropertyCheck) and check.person for check in checks):
            self._line("person = ctx.person")
        if self.record or any(isinstance(check, DependencyCheck) for check in checks):
            self._line("values = ctx.values")
        person_conditions = [c for c in conditions if not c.grouped]
        if flag.bucket_by_device and person_conditions:
            self._line("device_id = ctx.device_id")
        if any(self._hashes(condition) for condition in person_conditions):
            self._person_identifier()
        self._line(f"rank = {NO_GROUP_TYPE_RANK}")
        self._line(f"miss = {self._missed(NO_GROUP_TYPE_RANK, None)}")
        grouped = any(condition.grouped for condition in conditions)
        if grouped:
            self._line("skipped = False")
        for condition in conditions:
            self._line(f"# condition {condition.index}")
            if self._condition(condition):
                return
        if grouped:
            skipped = {
                c.index: flag._result(
                    False, None, NO_CONDITION_MATCH, c.index, GROUPS_NOT_EVALUATED_DESCRIPTION
                )
                for c in conditions
            }
            self._line(f"if skipped and rank == {NO_MATCH_RANK}:")
            with self._indented():
                self._line(f"return {self._bind('SKIPPED', skipped)}[miss.condition_index]")
        self._line("return miss")

    def _hashes(self, condition: Condition) -> bool:
        return condition.threshold is not None or (
            condition.variant is None and bool(self.flag.variants)
        )

    def _person_identifier(self) -> None:
        """``ident``: what person conditions hash (device id, override or distinct id)."""
        if self.flag.bucket_by_device:
            # Without a device id, no person condition reaches its hash.
            self._line(f"ident = device_id.encode({_ENCODING}) if device_id else b''")
            return
        self._line("ident = ctx.distinct_id_bytes")
        self._line("if ctx.overrides:")
        with self._indented():
            self._line(f"override = ctx.overrides.get({self._bind('KEY', self.flag.key)})")
            self._line("if override is not None:")
            with self._indented():
                self._line(f"ident = override.encode({_ENCODING})")

    def _condition(self, condition: Condition) -> bool:
        """Write one condition; True when it always returns (later ones are unreachable)."""
        index = condition.index
        keyword = "if"
        ident = "ident"
        ranks = {NO_MATCH_RANK}
        if condition.grouped:
            if condition.group_name is None:
                self._line("skipped = True")
                self._miss(NO_GROUP_TYPE_RANK, index)
                self._max_rank = max(self._max_rank, NO_GROUP_TYPE_RANK)
                return False
            group = self._bind("GROUP", condition.group_name)
            self._line(f"group_key = ctx.group_key({group})")
            self._line("if group_key is None:")
            with self._indented():
                self._line("skipped = True")
                self._miss(NO_GROUP_TYPE_RANK, index)
            keyword = "elif"
            ident = "group_ident"
            ranks.add(NO_GROUP_TYPE_RANK)
        elif self.flag.bucket_by_device:
            self._line("if not device_id:")
            with self._indented():
                self._miss(OUT_OF_ROLLOUT_RANK, index)
            keyword = "elif"
            ranks.add(OUT_OF_ROLLOUT_RANK)
        if condition.threshold is not None:
            ranks.add(OUT_OF_ROLLOUT_RANK)

        test = self._checks(condition.checks)
        always_returns = False
        if test is None and keyword == "if":
            always_returns = self._match(condition, ident)
        else:
            self._line(f"{keyword} {test}:" if test is not None else "else:")
            with self._indented():
                self._match(condition, ident)
            if test is not None:
                if self._max_rank <= NO_MATCH_RANK:
                    self._line("else:")
                else:
                    self._line(f"elif rank <= {NO_MATCH_RANK}:")
                with self._indented():
                    self._set_miss(NO_MATCH_RANK, index)
        self._max_rank = max(self._max_rank, *ranks)
        return always_returns

    def _match(self, condition: Condition, ident: str) -> bool:
        """The matched branch; True when it always returns."""
        if condition.grouped and self._hashes(condition):
            self._line(f"{ident} = group_key.encode({_ENCODING})")
        if condition.threshold is None:
            self._matched(condition, ident)
            return True
        limit = rollout_limit(condition.threshold)
        self._hash(ident, salted=False)
        self._line(f"if hashed >= {self._bind('OUT_OF_ROLLOUT', limit)}:")
        with self._indented():
            if self.flag.early_exit:
                self._line(f"return {self._missed(OUT_OF_ROLLOUT_RANK, condition.index)}")
            else:
                self._set_miss(OUT_OF_ROLLOUT_RANK, condition.index)
        self._line("else:")
        with self._indented():
            self._matched(condition, ident)
        return False

    def _matched(self, condition: Condition, ident: str) -> None:
        flag = self.flag
        index = condition.index
        if condition.variant is not None or not flag.variants:
            variant = condition.variant
            result = flag._result(True, variant, CONDITION_MATCH, index)
            if self.record:
                self._line(f"values[{flag.index}] = {self._bind('VALUE', variant or True)}")
            self._line(f"return {self._bind('MATCH', result)}")
            return
        self._hash(ident, salted=True)
        keyword = "if"
        for variant, upper in flag.variants:
            self._line(f"{keyword} hashed < {self._bind('UPPER', variant_limit(upper))}:")
            with self._indented():
                result = flag._result(True, variant, CONDITION_MATCH, index)
                self._line(f"result = {self._bind('MATCH', result)}")
            keyword = "elif"
        self._line("else:")
        with self._indented():
            result = flag._result(True, None, CONDITION_MATCH, index)
            self._line(f"result = {self._bind('MATCH', result)}")
        if self.record:
            self._line(f"values[{flag.index}] = result.variant or True")
        self._line("return result")

    def _hash(self, ident: str, *, salted: bool) -> None:
        """``hashed``: the first 64 bits of the bucketing digest (see hashing.rollout_limit);
        0 for an empty identifier."""
        self._line(f"if {ident}:")
        with self._indented():
            salt = " + VARIANT_SALT" if salted else ""
            self._line(f"hashed = first_64_bits(sha1({self._prefix} + {ident}{salt}).digest())[0]")
        self._line("else:")
        with self._indented():
            self._line("hashed = 0")

    def _missed(self, rank: int, index: int | None) -> str:
        return self._bind("MISS", self.flag._result(False, None, _CODES[rank], index))

    def _set_miss(self, rank: int, index: int) -> None:
        self._line(f"rank = {rank}")
        self._line(f"miss = {self._missed(rank, index)}")

    def _miss(self, rank: int, index: int) -> None:
        """A miss of ``rank``: it replaces the current miss unless that ranks higher."""
        if self._max_rank <= rank:
            self._set_miss(rank, index)
            return
        self._line(f"if rank <= {rank}:")
        with self._indented():
            self._set_miss(rank, index)
