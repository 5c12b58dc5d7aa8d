"""recrunner: declarative Hydra config runner for CTR ranking models on PaddlePaddle."""

import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
# The repository keeps conf/ and models/ at its root; setup.py installs them inside the package
# as recrunner/conf and recrunner/zoo. A source checkout (editable install, or the clone on
# PYTHONPATH) has no such folders in the package, so the repository's are used.
_CHECKOUT = not (PACKAGE_DIR / "zoo").is_dir()
CONF_DIR = PACKAGE_DIR.parent / "conf" if _CHECKOUT else PACKAGE_DIR / "conf"
ZOO_DIR = PACKAGE_DIR.parent / "models" if _CHECKOUT else PACKAGE_DIR / "zoo"
ZOO_PACKAGE = "recrunner.zoo"

if _CHECKOUT and ZOO_PACKAGE not in sys.modules and (ZOO_DIR / "__init__.py").is_file():
    # Import models/ under its installed name, so the zoo's relative imports, the runner and
    # users' models all say `recrunner.zoo` in both layouts; this checkout's zoo, not another's.
    _spec = importlib.util.spec_from_file_location(
        ZOO_PACKAGE, ZOO_DIR / "__init__.py", submodule_search_locations=[str(ZOO_DIR)])
    if _spec is not None and _spec.loader is not None:
        zoo = importlib.util.module_from_spec(_spec)
        sys.modules[ZOO_PACKAGE] = zoo
        _spec.loader.exec_module(zoo)
