"""Stand-in for myst_nb on a GPU machine without Jupyter: chapters run as plain scripts there.

`glue` prints the value it would have glued into the page, so the run's log shows every
number the prose would quote.
"""


def glue(name, variable, display=True):
    shown = getattr(variable, "data", variable)  # IPython Markdown/HTML objects: their text
    print(f"[glue] {name} = {shown!r}")
    return variable
