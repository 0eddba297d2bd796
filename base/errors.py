"""The base of every refusal the CLI prints as one line `mfargo: <message>` (exit 1).

Why a base here: front ends catch one class without importing the modules that raise it
(an offline compile must not import the deploy code just to name its exceptions).
"""


class UserError(Exception):
    """Something the user can act on, said in one line."""
