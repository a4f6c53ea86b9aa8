"""Sample documents and the demo deployment, embedded so `jobgate demo` runs anywhere."""

from importlib.resources import files
from pathlib import Path

SAMPLES = files(__name__)


def path(name: str) -> Path:
    return Path(str(SAMPLES.joinpath(name)))


DEMO_CONFIG = "jobgate.toml"
DOCUMENTS = [
    "jobspec.valid.json",
    "spec_bundle.valid.yaml",
    "jobspec.rejected.json",
    "spec_bundle.rejected.yaml",
]
