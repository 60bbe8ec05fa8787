"""Charts drawn on the server as inline SVG from the ledger's own figures (no chart library, no
script). The content security policy refuses style attributes: the shapes carry classes that
static/console.css colours, and geometry only as SVG attributes. Every chart scales with its box
(a viewBox, width set by CSS) and has a title and a description; the page puts the same figures
in a table beside it, for those who cannot see it."""

import math
from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 480, 220
LEFT, RIGHT, TOP, BOTTOM = 52, 10, 12, 48  # room for the axes' labels
TICK_EVERY = 6  # hours between the time axis' labels


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``value`` (1 for nothing)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _c(value: float) -> str:
    """A coordinate, to a tenth of a unit."""
    return f"{value:.1f}"


def _number(value: float) -> str:
    return f"{value:g}" if value < 1000 else f"{value:,.0f}"


def _frame(
    chart_id: str,
    title: str,
    description: str,
    body: SafeString,
    *,
    y_label: str,
    x_label: str,
    top: float,
    height: int = HEIGHT,
    y_suffix: str = "",
) -> SafeString:
    """The svg element, its title and description, the y axis from 0 to ``top`` and the axis labels."""
    plot_height = height - TOP - BOTTOM
    ticks = format_html_join(
        "",
        (
            '<line class="grid" x1="{0}" x2="{1}" y1="{2}" y2="{2}"/>'
            '<text class="tick" x="{3}" y="{2}" text-anchor="end" dominant-baseline="middle">{4}{5}</text>'
        ),
        (
            (LEFT, WIDTH - RIGHT, _c(TOP + plot_height * (1 - share)), LEFT - 6, _number(top * share), y_suffix)
            for share in (0, 0.5, 1)
        ),
    )
    return format_html(
        '<svg class="chart" id="{id}" viewBox="0 0 {w} {h}" role="img" aria-labelledby="{id}-title {id}-desc">'
        '<title id="{id}-title">{title}</title><desc id="{id}-desc">{desc}</desc>'
        '<g class="axis">{ticks}<line class="baseline" x1="{left}" x2="{right}" y1="{base}" y2="{base}"/></g>'
        "{body}"
        '<text class="axis-label" x="{mid}" y="{xl}" text-anchor="middle">{x_label}</text>'
        '<text class="axis-label y-label" transform="rotate(-90)" x="{ymid}" y="13" text-anchor="middle">'
        "{y_label}</text>"
        "</svg>",
        id=chart_id,
        w=WIDTH,
        h=height,
        title=title,
        desc=description,
        ticks=ticks,
        body=body,
        left=LEFT,
        right=WIDTH - RIGHT,
        base=height - BOTTOM,
        mid=_c((LEFT + WIDTH - RIGHT) / 2),
        xl=height - 6,
        ymid=_c(-(TOP + plot_height / 2)),
        x_label=x_label,
        y_label=y_label,
    )


def _hour_labels(hours: list[datetime], slot: float) -> SafeString:
    return format_html_join(
        "",
        '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
        (
            (_c(LEFT + slot * (index + 0.5)), HEIGHT - BOTTOM + 16, f"{timezone.localtime(hour):%H}:00")
            for index, hour in enumerate(hours)
            if index % TICK_EVERY == 0
        ),
    )


def _time_axis() -> str:
    return f"hour of the day ({timezone.get_current_timezone_name()})"


def hourly_bars(
    chart_id: str, hours: list[datetime], values: list[int], *, title: str, y_label: str, description: str
) -> SafeString:
    """One bar per hour (``values[i]`` in the hour starting at ``hours[i]``)."""
    top = nice_ceiling(max(values, default=0))
    slot = (WIDTH - LEFT - RIGHT) / max(len(hours), 1)
    plot_height = HEIGHT - TOP - BOTTOM
    bars = format_html_join(
        "",
        ('<rect class="bar" x="{}" y="{}" width="{}" height="{}"><title>{}: {}</title></rect>'),
        (
            (
                _c(LEFT + slot * index + slot * 0.15),
                _c(HEIGHT - BOTTOM - plot_height * value / top),
                _c(slot * 0.7),
                _c(plot_height * value / top),
                f"{timezone.localtime(hour):%H}:00",
                _number(value),
            )
            for index, (hour, value) in enumerate(zip(hours, values, strict=True))
            if value
        ),
    )
    return _frame(
        chart_id, title, description, bars + _hour_labels(hours, slot), y_label=y_label, x_label=_time_axis(), top=top
    )


def hourly_line(
    chart_id: str, hours: list[datetime], values: list[int | None], *, title: str, y_label: str, description: str
) -> SafeString:
    """A line through the hours that have a value, broken where one has none (not sampled), with a
    dot at each value (so a single one shows)."""
    top = nice_ceiling(max((value for value in values if value is not None), default=0))
    slot = (WIDTH - LEFT - RIGHT) / max(len(hours), 1)
    plot_height = HEIGHT - TOP - BOTTOM
    points = [
        (LEFT + slot * (index + 0.5), HEIGHT - BOTTOM - plot_height * value / top) if value is not None else None
        for index, value in enumerate(values)
    ]
    runs, run = [], []
    for point in [*points, None]:
        if point is None:
            if len(run) > 1:
                runs.append(run)
            run = []
        else:
            run.append(point)
    lines = format_html_join(
        "", '<polyline class="line" points="{}"/>', ((" ".join(f"{_c(x)},{_c(y)}" for x, y in run),) for run in runs)
    )
    dots = format_html_join(
        "",
        '<circle class="dot" cx="{}" cy="{}" r="3"><title>{}: {}</title></circle>',
        (
            (_c(point[0]), _c(point[1]), f"{timezone.localtime(hour):%H}:00", _number(value))
            for point, hour, value in zip(points, hours, values, strict=True)
            if point is not None
        ),
    )
    return _frame(
        chart_id,
        title,
        description,
        lines + dots + _hour_labels(hours, slot),
        y_label=y_label,
        x_label=_time_axis(),
        top=top,
    )


def _label(name: str, room: int = 19) -> str:
    """A name short enough for the room beside a bar (a destination's URL without its scheme)."""
    name = name.removeprefix("https://").removeprefix("http://")
    return name if len(name) <= room else name[: room - 1] + "…"


def rate_bars(chart_id: str, rates: list[tuple[str, float]], *, title: str, description: str) -> SafeString:
    """Horizontal bars, one per name, of a share in per cent (of a scale up to the largest)."""
    if not rates:
        return mark_safe("")
    label_width, row = 150, 26
    height = TOP + row * len(rates) + 40
    top = nice_ceiling(max(percent for _, percent in rates))
    span = WIDTH - label_width - RIGHT - 50
    bars = format_html_join(
        "",
        (
            '<text class="tick" x="{lx}" y="{ty}" text-anchor="end" dominant-baseline="middle">{name}</text>'
            '<rect class="bar fail" x="{x}" y="{y}" width="{w}" height="{h}"><title>{name}: {p} %</title></rect>'
            '<text class="value" x="{vx}" y="{ty}" dominant-baseline="middle">{p} %</text>'
        ),
        (
            {
                "lx": label_width - 6,
                "ty": _c(TOP + row * index + row / 2),
                "name": _label(name),
                "x": label_width,
                "y": _c(TOP + row * index + 4),
                "w": _c(span * percent / top),
                "h": row - 8,
                "p": f"{percent:.1f}",
                "vx": _c(label_width + span * percent / top + 4),
            }
            for index, (name, percent) in enumerate(rates)
        ),
    )
    base = TOP + row * len(rates)
    axis = format_html(
        '<line class="baseline" x1="{x}" x2="{x2}" y1="{b}" y2="{b}"/>'
        '<text class="tick" x="{x}" y="{t}" text-anchor="middle">0 %</text>'
        '<text class="tick" x="{x2}" y="{t}" text-anchor="middle">{top} %</text>'
        '<text class="axis-label" x="{mid}" y="{l}" text-anchor="middle">failed attempts, % of attempts</text>',
        x=label_width,
        x2=label_width + span,
        b=base,
        t=base + 16,
        top=_number(top),
        mid=_c(label_width + span / 2),
        l=base + 34,
    )
    return format_html(
        '<svg class="chart" id="{id}" viewBox="0 0 {w} {h}" role="img" aria-labelledby="{id}-title {id}-desc">'
        '<title id="{id}-title">{title}</title><desc id="{id}-desc">{desc}</desc>{bars}{axis}</svg>',
        id=chart_id,
        w=WIDTH,
        h=height,
        title=title,
        desc=description,
        bars=bars,
        axis=axis,
    )
