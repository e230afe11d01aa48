"""The public entry points: compile definitions once, evaluate them per request."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from flagstaff.flags.compiled_flag import CompiledFlag
from flagstaff.flags.context import Context
from flagstaff.flags.flag_builder import FlagBuilder, generate_functions, link_dependencies
from flagstaff.flags.flag_codegen import GeneratedSources
from flagstaff.flags.model import EvalRequest, FlagResult
from flagstaff.flags.runtime import contexts_allow, runtime_allows

_PLAN_CACHE_SIZE = 512
PlanKey = tuple[str | None, frozenset[str] | None, tuple[str, ...] | None]
Runner = Callable[[Context], FlagResult]


class CompiledFlags:
    """Immutable compiled definitions of one project, shared by all requests."""

    __slots__ = (
        "__weakref__",
        "_by_key",
        "_flags",
        "_lock",
        "_order",
        "_plans",
        "continuity_flag_keys",
        "has_dependency_cycle",
        "inactive_keys",
        "keys",
        "uses_static_cohorts",
    )

    def __init__(
        self,
        flags: list[CompiledFlag],
        order: list[int],
        continuity_flag_keys: frozenset[str],
        uses_static_cohorts: bool,
        has_dependency_cycle: bool,
    ) -> None:
        self._flags = tuple(flags)
        self._order = tuple(order)
        self._by_key = {flag.key: flag for flag in flags}
        self._plans: dict[PlanKey, tuple[Runner, ...]] = {}
        self._lock = threading.Lock()
        self.keys = frozenset(self._by_key)
        self.inactive_keys = tuple(flag.key for flag in flags if not flag.active)
        """The flags that are switched off (left out of every answer of /flags)."""
        self.continuity_flag_keys = continuity_flag_keys
        self.uses_static_cohorts = uses_static_cohorts
        self.has_dependency_cycle = has_dependency_cycle

    def plan(
        self,
        runtime: str | None,
        contexts: list[str] | None,
        flag_keys: list[str] | None,
    ) -> tuple[Runner, ...]:
        """The evaluation functions of the flags to evaluate and report, dependencies first."""
        key: PlanKey = (
            runtime,
            frozenset(contexts) if contexts else None,
            tuple(flag_keys) if flag_keys is not None else None,
        )
        plan = self._plans.get(key)
        if plan is None:
            plan = self._build_plan(*key)
            with self._lock:
                if len(self._plans) >= _PLAN_CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    def _build_plan(
        self,
        runtime: str | None,
        contexts: frozenset[str] | None,
        flag_keys: tuple[str, ...] | None,
    ) -> tuple[Runner, ...]:
        def allowed(flag: CompiledFlag) -> bool:
            return (
                flag.active
                and not flag.in_cycle
                and contexts_allow(flag.contexts, contexts)
                and runtime_allows(flag.runtime, runtime)
            )

        if flag_keys is None:
            chosen = {flag.index for flag in self._flags if allowed(flag)}
        else:
            chosen = set()
            pending = [self._by_key[k] for k in flag_keys if k in self._by_key]
            while pending:
                flag = pending.pop()
                if flag.index in chosen or not allowed(flag):
                    continue
                chosen.add(flag.index)
                pending.extend(self._flags[d] for d in flag.dependencies)
        return tuple(self._flags[index].run for index in self._order if index in chosen)

    def flag(self, key: str) -> CompiledFlag | None:
        return self._by_key.get(key)


def compile_flags(
    flags: list[dict[str, Any]],
    cohorts: Mapping[str, dict[str, Any]],
    group_type_mapping: Mapping[str, str],
) -> CompiledFlags:
    """Compile stored flag definitions. Deleted flags are dropped; a flag that cannot be
    compiled evaluates as failed instead of raising."""
    sources = GeneratedSources()
    builder = FlagBuilder(flags, cohorts, group_type_mapping, sources)
    built = builder.build()
    order, has_cycle = link_dependencies(built, builder.edges)
    for flag in built:
        generate_functions(flag, sources)
    continuity = frozenset(
        definition["key"]
        for definition in builder.definitions
        if definition.get("ensure_experience_continuity")
    )
    compiled = CompiledFlags(built, order, continuity, builder.cohorts.uses_static, has_cycle)
    # The generated sources stay in linecache as long as this version is in use.
    weakref.finalize(compiled, sources.release)
    return compiled


def evaluate(compiled: CompiledFlags, request: EvalRequest) -> list[FlagResult]:
    """Results for the active flags that pass the context and runtime filters (and
    ``flag_keys`` plus their dependencies), dependencies first. Inactive flags are omitted,
    as the PostHog server omits them; they count as false for dependent flags."""
    return evaluate_checked(compiled, request)[0]


def evaluate_checked(
    compiled: CompiledFlags, request: EvalRequest
) -> tuple[list[FlagResult], bool]:
    """``evaluate``'s results, and whether any of them failed."""
    plan = compiled.plan(request.runtime, request.contexts, request.flag_keys)
    ctx = Context(request)
    return [run(ctx) for run in plan], ctx.failed
