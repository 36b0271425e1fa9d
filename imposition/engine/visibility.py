"""Optional content (layers) as the document's default configuration shows it: hidden content removed.

A plate keeps nothing of the source's catalog, so a viewer or RIP would show every layer of it. Before
the pages become forms, content that the default configuration (/OCProperties /D, PDF 32000-1
§8.11.4.3) turns off is taken out: marked-content sections ``/OC /Name BDC … EMC`` whose optional
content group or membership dictionary is off, ``Do`` of an XObject whose /OC is off, in page content
and in the forms it draws, and annotations whose /OC is off. Runs in the engine's child process,
only for documents that have /OCProperties.

Visibility (§8.11.2): an OCG is on unless the configuration's /BaseState is /OFF and it is not in
/ON, or it is in /OFF. An OCMD (§8.11.2.2) follows its /P policy over its /OCGs (AnyOn by default);
a visibility expression (/VE) is evaluated when present.
"""

from __future__ import annotations

import pikepdf
from pikepdf import Array, Dictionary, Name

#: Deepest nesting of forms and of visibility expressions followed (guards a cycle).
MAX_DEPTH = 16


class _Visibility:
    """Which optional content is on in the default configuration."""

    def __init__(self, properties: Dictionary) -> None:
        config = properties.get("/D")
        config = config if isinstance(config, Dictionary) else Dictionary()
        every = [g.objgen for g in properties.get("/OCGs", Array()) if isinstance(g, Dictionary)]
        named_on = {g.objgen for g in config.get("/ON", Array()) if isinstance(g, Dictionary)}
        named_off = {g.objgen for g in config.get("/OFF", Array()) if isinstance(g, Dictionary)}
        if config.get("/BaseState") == Name.OFF:
            self.off = (set(every) - named_on) | named_off
        else:
            self.off = named_off

    def visible(self, oc: pikepdf.Object | None, depth: int = 0) -> bool:
        """Whether content marked with ``oc`` (an OCG or OCMD dictionary, or None) is shown."""
        if not isinstance(oc, Dictionary) or depth > MAX_DEPTH:
            return True
        if oc.get("/Type") == Name.OCMD:
            expression = oc.get("/VE")
            if isinstance(expression, Array):
                return self._expression(expression, depth + 1)
            named = oc.get("/OCGs")
            groups = ([named] if isinstance(named, Dictionary)
                      else [g for g in (named or []) if isinstance(g, Dictionary)])
            if not groups:
                return True
            states = [self.visible(g, depth + 1) for g in groups]
            policy = oc.get("/P", Name.AnyOn)
            if policy == Name.AllOn:
                return all(states)
            if policy == Name.AnyOff:
                return not all(states)
            if policy == Name.AllOff:
                return not any(states)
            return any(states)
        return oc.objgen not in self.off

    def _expression(self, expression: Array, depth: int) -> bool:
        if depth > MAX_DEPTH or len(expression) == 0:
            return True
        operator, operands = expression[0], list(expression)[1:]
        values = [self._expression(o, depth + 1) if isinstance(o, Array) else self.visible(o, depth + 1) for o in operands]
        if operator == Name.Not:
            return not values[0] if values else True
        if operator == Name.Or:
            return any(values)
        return all(values)  # /And


def _filtered(instructions: list, resources: Dictionary, visibility: _Visibility) -> list | None:
    """The instructions without the hidden sections and hidden XObjects, or None when nothing is hidden."""
    properties = resources.get("/Properties")
    xobjects = resources.get("/XObject")
    kept: list = []
    hidden_depth = 0  # > 0 inside a hidden section: counts its marked-content nesting
    changed = False
    for instruction in instructions:
        operands, operator = instruction.operands, str(instruction.operator)
        if hidden_depth:
            changed = True
            if operator in ("BDC", "BMC"):
                hidden_depth += 1
            elif operator == "EMC":
                hidden_depth -= 1
            continue
        if operator == "BDC" and len(operands) == 2 and operands[0] == Name.OC:
            oc = operands[1]
            if isinstance(oc, Name) and isinstance(properties, Dictionary):
                oc = properties.get(oc)
            if not visibility.visible(oc):
                hidden_depth = 1
                changed = True
                continue
        if operator == "Do" and operands and isinstance(xobjects, Dictionary):
            xobject = xobjects.get(operands[0])
            if isinstance(xobject, pikepdf.Stream) and not visibility.visible(xobject.get("/OC")):
                changed = True
                continue
        kept.append(instruction)
    return kept if changed else None


def _forms(resources: Dictionary) -> list[pikepdf.Stream]:
    xobjects = resources.get("/XObject")
    if not isinstance(xobjects, Dictionary):
        return []
    return [x for _, x in xobjects.items() if isinstance(x, pikepdf.Stream) and x.get("/Subtype") == Name.Form]


def hide_optional_content(pdf: pikepdf.Pdf) -> int:
    """Remove from ``pdf``'s pages (and the forms they draw) the content its default optional-content
    configuration hides. Returns how many content streams and annotation lists were changed (0 when
    the document has no /OCProperties)."""
    properties = pdf.Root.get("/OCProperties")
    if not isinstance(properties, Dictionary):
        return 0
    visibility = _Visibility(properties)
    changed = 0
    seen: set[tuple[int, int]] = set()
    for page in pdf.pages:
        resources = page.obj.get("/Resources")
        resources = resources if isinstance(resources, Dictionary) else Dictionary()
        kept = _filtered(pikepdf.parse_content_stream(page), resources, visibility)
        if kept is not None:
            page.obj.Contents = pdf.make_stream(pikepdf.unparse_content_stream(kept))
            changed += 1
        pending = [(form, 1) for form in _forms(resources)]
        while pending:
            form, depth = pending.pop()
            if form.objgen in seen or depth > MAX_DEPTH:
                continue
            seen.add(form.objgen)
            form_resources = form.get("/Resources")
            form_resources = form_resources if isinstance(form_resources, Dictionary) else resources
            kept = _filtered(pikepdf.parse_content_stream(form), form_resources, visibility)
            if kept is not None:
                form.write(pikepdf.unparse_content_stream(kept))
                changed += 1
            pending.extend((inner, depth + 1) for inner in _forms(form_resources))
        annotations = page.obj.get("/Annots")
        if isinstance(annotations, Array):
            shown = [a for a in annotations if not isinstance(a, Dictionary) or visibility.visible(a.get("/OC"))]
            if len(shown) != len(annotations):
                page.obj.Annots = Array(shown)
                changed += 1
    return changed
