"""recrunner: declarative Hydra config runner for CTR ranking models on PaddlePaddle."""

from pathlib import Path

__version__ = "0.1.0"

# The repository root holds conf/ and models/; the package is installed editable (pip install -e .).
REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
