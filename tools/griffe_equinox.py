"""Griffe extension: constructor signatures of equinox modules and NamedTuples.

An ``equinox.Module`` without its own ``__init__`` (and a ``typing.NamedTuple``) is built from its
annotated fields, like a dataclass, but static analysis does not know that: the API pages would
show no signature. This extension adds the ``__init__`` that the dataclass machinery creates at run
time: the annotated fields in definition order, parents' first, with the defaults of
``eqx.field(default=...)`` or plain assignments. ``ClassVar`` and ``eqx.AbstractVar`` annotations
are not fields.
"""

from typing import Any

import griffe

_MODULE_BASES = {"equinox.Module", "equinox._module.Module", "equinox._module._module.Module"}
_TUPLE_BASES = {"typing.NamedTuple", "NamedTuple"}
_NOT_FIELDS = ("ClassVar", "AbstractVar", "AbstractClassVar")


def _base_paths(cls: griffe.Class) -> set[str]:
    out = set()
    for base in cls.bases:
        out.add(base.canonical_path if isinstance(base, griffe.Expr) else str(base))
    return out


def _kind(cls: griffe.Class, seen: frozenset = frozenset()) -> str | None:
    """'module' / 'tuple' when ``cls`` is (a subclass of) eqx.Module / NamedTuple."""
    paths = _base_paths(cls)
    if paths & _MODULE_BASES:
        return "module"
    if paths & _TUPLE_BASES:
        return "tuple"
    for base in cls.resolved_bases if cls.path not in seen else []:
        kind = _kind(base, seen | {cls.path})
        if kind:
            return kind
    return None


def _default(attr: griffe.Attribute) -> Any:
    value = attr.value
    if value is None:
        return None
    if isinstance(value, griffe.ExprCall) and str(value.function).endswith("field"):
        for arg in value.arguments:
            name = getattr(arg, "name", None)
            if name == "default":
                return arg.value
            if name == "default_factory":
                return griffe.ExprCall(function=arg.value, arguments=[])
        return None
    return value


def _fields(cls: griffe.Class, seen: frozenset = frozenset()) -> list[griffe.Parameter]:
    params: dict[str, griffe.Parameter] = {}
    if cls.path not in seen:
        try:
            bases = cls.resolved_bases
        except Exception:  # an unresolvable base: its fields are not known statically
            bases = []
        for base in bases:
            for p in _fields(base, seen | {cls.path}):
                params[p.name] = p
    for member in cls.members.values():
        if member.is_alias or not member.is_attribute or member.annotation is None:
            continue
        if "property" in member.labels or any(n in str(member.annotation) for n in _NOT_FIELDS):
            continue
        params[member.name] = griffe.Parameter(
            member.name,
            annotation=member.annotation,
            kind=griffe.ParameterKind.positional_or_keyword,
            default=_default(member),
            docstring=member.docstring,
        )
    return list(params.values())


class EquinoxInit(griffe.Extension):
    """Add the field-built ``__init__`` of equinox modules and NamedTuples without one."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Add the missing ``__init__`` of every class of the loaded package."""
        self._walk(pkg, set())

    def _walk(self, obj, seen: set) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        for member in list(obj.members.values()):
            if member.is_alias:
                continue
            if member.is_class:
                self._add_init(member)
                self._walk(member, seen)
            elif member.is_module:
                self._walk(member, seen)

    def _add_init(self, cls: griffe.Class) -> None:
        if "__init__" in cls.members or not _kind(cls):
            return
        fields = _fields(cls)
        # Parameters without a default first (as the dataclass machinery requires).
        init = griffe.Function(
            "__init__",
            lineno=cls.lineno,
            endlineno=cls.lineno,
            parent=cls,
            parameters=griffe.Parameters(
                griffe.Parameter(
                    "self", annotation=None, kind=griffe.ParameterKind.positional_or_keyword
                ),
                *fields,
            ),
            returns="None",
        )
        cls.set_member("__init__", init)
