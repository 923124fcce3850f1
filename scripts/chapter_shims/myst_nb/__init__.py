"""Stand-in for myst_nb on a GPU machine without Jupyter: chapters run as plain scripts there.

`glue` prints the value it would have glued into the page, so the run's log shows every
number the prose would quote.
"""


def glue(name, variable, display=True):
    print(f"[glue] {name} = {variable!r}")
    return variable
