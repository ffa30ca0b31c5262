"""Interactive figures: sliders and dropdowns that redraw a matplotlib plot.

The labs use this to let you *feel* a hyper-parameter: drag the temperature,
the noise level ``t`` or the guidance scale and watch the samples change::

    from genlab.widgets import interactive_plot, slider, dropdown

    def draw(fig, t, schedule):
        ax = fig.add_subplot()
        ax.imshow(noisy_image(t, schedule))

    interactive_plot(draw, slider("t", 0, 999, 1, 0), dropdown("schedule", ["linear", "cosine"]))
    # or, keyword style (the keyword is the parameter name):
    interactive_plot(draw, t=(0, 999, 1), schedule=["linear", "cosine"])

Design choices, and why:

* ``draw(fig, **values)`` receives a *cleared* :class:`matplotlib.figure.Figure`
  that is not registered with pyplot. Jupyter's inline backend therefore never
  shows it a second time at the end of the cell, and redrawing 100 times does
  not pile up 100 figures in pyplot's registry.
* The figure is rendered to PNG and placed in an :class:`ipywidgets.Output` by
  setting its ``outputs`` directly, which replaces the old picture in one step
  (no flicker) and works with no frontend attached (nbclient, pytest): it is
  then just a Python object that nobody renders.
* An exception in ``draw`` during a slider change is shown inside the widget
  instead of vanishing into the widget callback log; an exception during the
  first draw is raised, so a broken ``draw`` fails loudly in the cell.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Slider", "Dropdown", "slider", "dropdown", "interactive_plot"]


# ---------------------------------------------------------------------------
# Specs: plain descriptions of a control, turned into widgets later
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Slider:
    """A numeric slider. Integer if min, max and step are all ints, float otherwise."""

    name: str
    min: float
    max: float
    step: float | None = None
    value: float | None = None


@dataclass(frozen=True)
class Dropdown:
    """A choice among ``options`` (strings, numbers, or ``(label, value)`` pairs)."""

    name: str
    options: Sequence[Any]
    value: Any = None


def slider(name: str, min: float, max: float, step: float | None = None, value: float | None = None) -> Slider:
    """Spec for a slider passed to ``draw`` as ``name``; ``value`` defaults to ``min``."""
    return Slider(name, min, max, step, value)


def dropdown(name: str, options: Sequence[Any], value: Any = None) -> Dropdown:
    """Spec for a dropdown passed to ``draw`` as ``name``; ``value`` defaults to the first option."""
    return Dropdown(name, list(options), value)


def _spec_from_shorthand(name: str, spec: Any):
    """Turn a keyword argument into a spec, following ``ipywidgets.interact`` shorthands.

    ``(min, max)`` or ``(min, max, step)`` -> slider; a list -> dropdown;
    an existing spec or ipywidgets widget is used as is (renamed to ``name``).
    """
    import ipywidgets as W

    if isinstance(spec, Slider | Dropdown):
        return dataclasses.replace(spec, name=name)
    if isinstance(spec, W.ValueWidget):
        return spec
    if isinstance(spec, tuple) and len(spec) in (2, 3) and all(isinstance(v, int | float) for v in spec):
        return Slider(name, *spec)
    if isinstance(spec, list | range) and len(spec) > 0:
        return Dropdown(name, list(spec))
    raise TypeError(
        f"interactive_plot: control {name!r} should be slider(...), dropdown(...), a (min, max[, step]) "
        f"tuple, a non-empty list of options or an ipywidgets widget; got {spec!r}."
    )


def _build_widget(spec):
    """Create the ipywidgets control for one spec."""
    import ipywidgets as W

    if isinstance(spec, W.ValueWidget):
        return spec
    style = {"description_width": "initial"}  # show long names in full
    if isinstance(spec, Slider):
        if spec.min >= spec.max:
            raise ValueError(f"slider {spec.name!r}: expected min < max, got min={spec.min}, max={spec.max}.")
        is_int = all(isinstance(v, int) and not isinstance(v, bool) for v in (spec.min, spec.max, spec.step or 1))
        if is_int and (spec.value is None or isinstance(spec.value, int)):
            cls, step = W.IntSlider, spec.step or 1
        else:
            # 100 steps across the range is fine-grained enough to feel continuous.
            cls, step = W.FloatSlider, spec.step or (spec.max - spec.min) / 100
        value = spec.min if spec.value is None else spec.value
        if not spec.min <= value <= spec.max:
            raise ValueError(
                f"slider {spec.name!r}: expected value within [{spec.min}, {spec.max}], got {value}."
            )
        return cls(
            value=value, min=spec.min, max=spec.max, step=step, description=spec.name,
            continuous_update=False,  # redraw on release: a training-time plot can take a moment
            style=style,
        )
    if isinstance(spec, Dropdown):
        options = list(spec.options)
        if not options:
            raise ValueError(f"dropdown {spec.name!r}: expected at least one option, got none.")
        widget = W.Dropdown(options=options, description=spec.name, style=style)
        if spec.value is not None:
            widget.value = spec.value  # ipywidgets raises a TraitError for a value not in options
        return widget
    raise TypeError(f"interactive_plot: unknown control spec {spec!r}.")


# ---------------------------------------------------------------------------
# The interactive figure
# ---------------------------------------------------------------------------

def _figure_png_bundle(fig) -> dict:
    """A display_data message holding the figure as PNG, as Jupyter stores it (base64)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {
        "output_type": "display_data",
        "data": {
            "image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
            "text/plain": f"<Figure {fig.get_figwidth():g}x{fig.get_figheight():g} in>",
        },
        "metadata": {},
    }


def interactive_plot(draw: Callable[..., Any], *specs, figsize=(6, 4), **controls):
    """Build controls, draw once, and redraw whenever a control changes.

    Args:
        draw: ``draw(fig, **values)``; gets a cleared figure and the current
            value of every control by name. Add axes with ``fig.add_subplot()``
            or ``fig.subplots(...)``. Its return value is ignored.
        *specs: :func:`slider` / :func:`dropdown` specs (named by their ``name``).
        figsize: figure size in inches.
        **controls: more controls, named by the keyword: a spec, a
            ``(min, max[, step])`` tuple, a list of options, or a widget.

    Returns:
        An ``ipywidgets.VBox`` (controls above the picture). For scripting and
        tests it also carries ``.controls`` (name -> widget), ``.output``,
        ``.figure`` and ``.redraw()``.
    """
    import ipywidgets as W
    from matplotlib.figure import Figure

    if not callable(draw):
        raise TypeError(f"interactive_plot: expected a function draw(fig, **values), got {draw!r}.")

    named: dict[str, Any] = {}
    for spec in specs:
        if not isinstance(spec, Slider | Dropdown):
            raise TypeError(
                f"interactive_plot: positional controls must be slider(...) or dropdown(...), got {spec!r}. "
                "Pass other kinds as keywords, e.g. t=(0, 10)."
            )
        named[spec.name] = spec
    for name, spec in controls.items():
        if name in named:
            raise ValueError(f"interactive_plot: control {name!r} is given twice.")
        named[name] = _spec_from_shorthand(name, spec)

    widgets = {name: _build_widget(spec) for name, spec in named.items()}
    output = W.Output()
    fig = Figure(figsize=figsize)  # not pyplot-managed: see the module docstring

    def render() -> None:
        fig.clear()
        draw(fig, **{name: w.value for name, w in widgets.items()})
        output.outputs = (_figure_png_bundle(fig),)

    def on_change(_change) -> None:
        try:
            render()
        except Exception:  # show the student's error where they are looking
            output.outputs = (
                {"output_type": "stream", "name": "stderr", "text": traceback.format_exc()},
            )

    render()  # first draw: let errors propagate
    for w in widgets.values():
        w.observe(on_change, names="value")

    box = W.VBox([*widgets.values(), output])
    box.controls, box.output, box.figure, box.redraw = widgets, output, fig, render
    return box
