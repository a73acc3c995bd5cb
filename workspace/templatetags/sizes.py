"""Sizes as people read them: decimal units (1 kB = 1000 bytes), the same as the quota's settings
are written in. Django's filesizeformat divides by 1024 but writes "MB", so a 200 MB quota read
"190.7 MB"."""

from django import template

register = template.Library()

UNITS = ("kB", "MB", "GB", "TB")


@register.filter
def size(value: int | float | str | None) -> str:
    """`value` bytes in words: "0 bytes", "1 byte", "999 bytes", "1.5 kB", "200 MB" (one
    decimal below 10 units, none above: the figures a person compares), with a no-break space
    so a size never wraps apart from its unit."""
    try:
        amount = float(value or 0)
    except (TypeError, ValueError):
        return "0 bytes"
    if amount < 1000:
        whole = int(amount)
        return f"{whole}\u00a0byte{'' if whole == 1 else 's'}"
    for unit in UNITS:
        amount /= 1000
        if amount < 1000 or unit == UNITS[-1]:
            break
    shown = f"{amount:.1f}".removesuffix(".0") if amount < 10 else f"{amount:.0f}"
    return f"{shown}\u00a0{unit}"
