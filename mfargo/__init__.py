"""mfargo: compile Metaflow flows to Argo Workflows; @parallel steps become JobSet gangs."""

import os as _os

__version__ = "0.1.0"

# In a checkout, base/, compiler/, templates/ and runner/ sit beside this folder and install
# as mfargo.base, mfargo.compiler, mfargo.templates and mfargo.runner (pyproject.toml's package-dir). Python
# started in the checkout's root imports this folder before an installed mfargo, whatever
# the install (`python -m pytest` puts the root first); its subpackages then resolve here too.
_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_ROOT, "pyproject.toml")) and all(
        _os.path.isfile(_os.path.join(_ROOT, sub, "__init__.py")) for sub in ("base", "compiler", "templates", "runner")):
    __path__.append(_ROOT)
